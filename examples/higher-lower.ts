/**
 * A second non-MCP environment: find a secret number from 1 to 9 in at most four guesses, told after each
 * guess whether the secret is higher or lower. A reply that does not start with a digit 1-9 forfeits. The
 * reward: 1 for finding the number, plus 0.25 for each guess left unused; 0.1 per valid guess otherwise.
 * Same shape as tic-tac-toe.ts: plain `openai` agent code, recorded by a TrajectoryRecorder.
 */
import { TrajectoryRecorder, type TrainableModel, type TrajectoryInput } from '../src/index.js';
import { modelReply, parseMove, type GameMessages, type PlayOptions } from './tic-tac-toe.js';

export const MAX_GUESSES = 4;

export interface GuessResult {
  reward: number;
  validGuesses: number;
  found: boolean;
}

/** The secret of a game: a number from 1 to 9 picked by its seed. */
export function secretOf(gameSeed: number): number {
  return 1 + ((gameSeed * 7 + 3) % 9);
}

export async function playHigherLower(model: TrainableModel, opts: PlayOptions): Promise<{ trajectory: TrajectoryInput; result: GuessResult }> {
  const recorder = new TrajectoryRecorder();
  const client = model.openai({ fetch: recorder.fetch, maxRetries: 0 });
  const secret = secretOf(opts.gameSeed);
  const messages: GameMessages = [
    { role: 'user', content: 'Guess the secret number from 1 to 9. Reply with one number.' },
  ];
  let validGuesses = 0;
  let found = false;
  for (let turn = 0; turn < MAX_GUESSES; turn++) {
    const reply = await modelReply(client, model, messages, opts, turn);
    const guess = parseMove(reply);
    if (guess === null) break;
    validGuesses++;
    if (guess === secret) {
      found = true;
      break;
    }
    messages.push({ role: 'user', content: `${guess} is too ${guess > secret ? 'high' : 'low'}. Reply with one number.` });
  }
  const reward = found ? 1 + 0.25 * (MAX_GUESSES - validGuesses) : 0.1 * validGuesses;
  const trajectory = recorder.trajectory({
    reward,
    metrics: { found: found ? 1 : 0, valid_guesses: validGuesses },
    metadata: { gameSeed: opts.gameSeed, secret },
  });
  return { trajectory, result: { reward, validGuesses, found } };
}
