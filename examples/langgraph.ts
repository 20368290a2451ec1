/**
 * An agent written with LangGraph.js, trained through the library (docs/library.md shows this file;
 * test/backend-langgraph.test.ts runs it; `npm run example -- langgraph` trains it with progress, examples/run.ts).
 * The agent is ordinary LangGraph code: a graph whose `guess` node calls a ChatOpenAI model and whose `referee`
 * node applies the rules of higher-lower (examples/higher-lower.ts: find a secret number from 1 to 9 in four
 * guesses, told higher or lower; here a lost game also scores how close its last guess came). The only mcprl
 * parts are where the model lives — ChatOpenAI pointed at the trainable model's base URL — and the recorder's
 * fetch, which keeps each answer's exact token ids and logprobs. The model node streams (`llm.stream`), as
 * LangGraph agents often do.
 * (`streaming: true` with `invoke` would also work, but ChatOpenAI then estimates token usage with tiktoken,
 * which downloads its tables from the network.)
 *
 *   START → guess → referee → guess → … → END
 */
import { HumanMessage, type AIMessageChunk } from '@langchain/core/messages';
import { Annotation, END, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ChatOpenAI } from '@langchain/openai';
import { gatherTrajectoryGroups, LocalBackend, TrainableModel, TrajectoryRecorder, type TrainResult, type TrajectoryGroup, type TrajectoryInput } from '../src/index.js';
import { MAX_GUESSES, secretOf } from './higher-lower.js';
import { parseMove } from './tic-tac-toe.js';

/** The graph's state: the conversation, plus the game the referee keeps. */
const GameState = Annotation.Root({
  ...MessagesAnnotation.spec,
  secret: Annotation<number>(),
  validGuesses: Annotation<number>(),
  /** The last valid guess (0 before the first). */
  lastGuess: Annotation<number>(),
  found: Annotation<boolean>(),
  over: Annotation<boolean>(),
});

/** The agent: a model node and a referee node, looping until the game is over. */
export function guessingGraph(llm: ChatOpenAI) {
  return new StateGraph(GameState)
    .addNode('guess', async (s) => {
      // Streamed, as a chat UI would show it; the chunks joined are the model's turn.
      let reply: AIMessageChunk | undefined;
      for await (const chunk of await llm.stream(s.messages)) reply = reply ? reply.concat(chunk) : chunk;
      return { messages: reply ? [reply] : [] };
    })
    .addNode('referee', (s) => {
      const reply = s.messages[s.messages.length - 1].content;
      const guess = parseMove(typeof reply === 'string' ? reply : '');
      if (guess === null) return { over: true }; // a reply that is not a number forfeits
      const validGuesses = s.validGuesses + 1;
      if (guess === s.secret) return { validGuesses, lastGuess: guess, found: true, over: true };
      if (validGuesses >= MAX_GUESSES) return { validGuesses, lastGuess: guess, over: true };
      return { validGuesses, lastGuess: guess, messages: [new HumanMessage(`${guess} is too ${guess > s.secret ? 'high' : 'low'}. Reply with one number.`)] };
    })
    .addEdge(START, 'guess')
    .addEdge('guess', 'referee')
    .addConditionalEdges('referee', (s) => (s.over ? END : 'guess'))
    .compile();
}

export interface LangGraphGameOptions {
  gameSeed: number;
  /** Seed of the model's sampling in this game. */
  samplingSeed: number;
  /** The recorder's inner fetch (a test watches the wire with it). Default: the global fetch. */
  fetch?: typeof fetch;
}

/** Plays one game through the graph; resolves with the recorded trajectory, its reward set by the game's rules. */
export async function playLangGraph(model: TrainableModel, opts: LangGraphGameOptions): Promise<TrajectoryInput> {
  const recorder = new TrajectoryRecorder(opts.fetch ? { fetch: opts.fetch } : {});
  const llm = new ChatOpenAI({
    model: model.inferenceName,
    apiKey: model.apiKey,
    configuration: { baseURL: model.baseURL, fetch: recorder.fetch },
    temperature: 1,
    maxTokens: 8,
    maxRetries: 0,
    modelKwargs: { seed: opts.samplingSeed },
  });
  const secret = secretOf(opts.gameSeed);
  const end = await guessingGraph(llm).invoke({
    messages: [new HumanMessage('Guess the secret number from 1 to 9. Reply with one number.')],
    secret,
    validGuesses: 0,
    lastGuess: 0,
    found: false,
    over: false,
  });
  // higher-lower's reward, plus (when not found) up to 0.2 for how close the last guess came: the tiny model rarely
  // finds the number in a few games, and without this its games would all score alike and teach nothing.
  const closeness = end.lastGuess === 0 ? 0 : 0.2 * (1 - Math.abs(end.lastGuess - secret) / 8);
  const reward = end.found ? 1 + 0.25 * (MAX_GUESSES - end.validGuesses) : 0.1 * end.validGuesses + closeness;
  return recorder.trajectory({ reward, metrics: { found: end.found ? 1 : 0, valid_guesses: end.validGuesses }, metadata: { gameSeed: opts.gameSeed, secret } });
}

/** Trains the LangGraph agent's model for `steps` steps of `games` groups × `perGroup` games each; `onStep` sees each step's result. */
export async function trainLangGraph(opts: {
  dir: string;
  baseModel: string;
  steps: number;
  games: number;
  perGroup: number;
  lr: number;
  onStep?: (result: TrainResult, step: number) => void;
}): Promise<{
  results: TrainResult[];
  groups: TrajectoryGroup[][];
}> {
  const backend = new LocalBackend({ dir: opts.dir });
  const model = new TrainableModel({ project: 'langgraph', name: 'guesser', baseModel: opts.baseModel, lora: { rank: 4, alpha: 8, seed: 3 } });
  await model.register(backend);
  const results: TrainResult[] = [];
  const groups: TrajectoryGroup[][] = [];
  try {
    for (let step = 1; step <= opts.steps; step++) {
      const seeds = Array.from({ length: opts.games }, (_, g) => 100 * step + g + 1);
      const gathered = await gatherTrajectoryGroups(
        seeds,
        (gameSeed, ctx) => playLangGraph(model, { gameSeed, samplingSeed: 10_000 * step + 100 * ctx.item + 10 * ctx.attempt }),
        { perGroup: opts.perGroup, concurrency: opts.perGroup, maxFailures: 0 },
      );
      groups.push(gathered);
      const result = await model.train(gathered, { lr: opts.lr });
      results.push(result);
      opts.onStep?.(result, step);
    }
  } finally {
    await backend.close();
  }
  return { results, groups };
}
