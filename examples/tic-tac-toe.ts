/**
 * A non-MCP environment trained through the library: tic-tac-toe against a scripted opponent.
 *
 * The agent is plain application code on the `openai` client: each turn it shows the board and the free cells
 * and asks for a move; the model answers with a cell number. The scripted opponent (O) plays a free cell
 * picked by the game's seed. A reply that does not start with a free cell's digit forfeits the game. The reward is
 * programmatic: 0.2 per legal move, plus 1 for a win and 0.5 for a draw.
 *
 * The recorder (TrajectoryRecorder) sits in the client's fetch and turns the calls into a Trajectory with the
 * exact token ids the server sampled, so `model.train(groups)` trains on what the model really produced.
 */
import type OpenAI from 'openai';
import { TrajectoryRecorder, type TrainableModel, type TrajectoryInput } from '../src/index.js';

type Mark = 'X' | 'O' | null;

const LINES = [
  [0, 1, 2], [3, 4, 5], [6, 7, 8],
  [0, 3, 6], [1, 4, 7], [2, 5, 8],
  [0, 4, 8], [2, 4, 6],
];

export function winner(board: readonly Mark[]): Mark {
  for (const [a, b, c] of LINES) if (board[a] && board[a] === board[b] && board[a] === board[c]) return board[a];
  return null;
}

export function freeCells(board: readonly Mark[]): number[] {
  return board.flatMap((m, i) => (m === null ? [i + 1] : []));
}

/** The board as the model reads it: three rows of X, O and '.'. */
export function showBoard(board: readonly Mark[]): string {
  const cell = (m: Mark) => m ?? '.';
  return [0, 3, 6].map((r) => `${cell(board[r])} ${cell(board[r + 1])} ${cell(board[r + 2])}`).join('|');
}

/** The move a reply makes: its first character as a cell 1-9, or null. */
export function parseMove(reply: string | null | undefined): number | null {
  const m = /^\s*([1-9])/.exec(reply ?? '');
  return m ? Number(m[1]) : null;
}

/** The scripted opponent: a free cell chosen by the game's seed and the turn (no strategy). */
export function opponentMove(free: readonly number[], gameSeed: number, turn: number): number {
  return free[(gameSeed * 31 + turn * 17) % free.length];
}

export interface GameResult {
  reward: number;
  legalMoves: number;
  outcome: 'win' | 'loss' | 'draw' | 'forfeit';
}

export interface PlayOptions {
  /** Seeds the opponent's moves. */
  gameSeed: number;
  /** Seeds the model's sampling (each turn adds its number). Default: unseeded. */
  samplingSeed?: number;
  /** Default 1. */
  temperature?: number;
  /** Longest reply, in tokens. Default 8. */
  maxTokens?: number;
}

/** A game's conversation: the environment's messages and the model's replies. */
export type GameMessages = { role: 'user' | 'assistant'; content: string }[];

/** The model's next move: asks with the conversation so far (sampling as `opts` says), appends the reply and returns it. */
export async function modelReply(client: OpenAI, model: TrainableModel, messages: GameMessages, opts: PlayOptions, turn: number): Promise<string> {
  const completion = await client.chat.completions.create({
    model: model.inferenceName,
    messages,
    temperature: opts.temperature ?? 1,
    max_tokens: opts.maxTokens ?? 8,
    ...(opts.samplingSeed !== undefined ? { seed: opts.samplingSeed + turn } : {}),
  });
  const reply = completion.choices[0].message.content ?? '';
  messages.push({ role: 'assistant', content: reply });
  return reply;
}

/** Plays one game; resolves with the trajectory (reward set) and the result. */
export async function playGame(model: TrainableModel, opts: PlayOptions): Promise<{ trajectory: TrajectoryInput; result: GameResult }> {
  const recorder = new TrajectoryRecorder();
  const client = model.openai({ fetch: recorder.fetch, maxRetries: 0 });
  const board: Mark[] = Array<Mark>(9).fill(null);
  const messages: GameMessages = [];
  let legalMoves = 0;
  let outcome: GameResult['outcome'] = 'draw';
  for (let turn = 0; ; turn++) {
    const free = freeCells(board);
    messages.push({ role: 'user', content: `You play X on cells 1-9. Board: ${showBoard(board)}. Free cells: ${free.join(', ')}. Reply with one free cell number.` });
    const reply = await modelReply(client, model, messages, opts, turn);
    const move = parseMove(reply);
    if (move === null || board[move - 1] !== null) {
      outcome = 'forfeit';
      break;
    }
    board[move - 1] = 'X';
    legalMoves++;
    if (winner(board) === 'X') {
      outcome = 'win';
      break;
    }
    const left = freeCells(board);
    if (left.length === 0) break;
    board[opponentMove(left, opts.gameSeed, turn) - 1] = 'O';
    if (winner(board) === 'O') {
      outcome = 'loss';
      break;
    }
  }
  const reward = 0.2 * legalMoves + (outcome === 'win' ? 1 : outcome === 'draw' ? 0.5 : 0);
  const result = { reward, legalMoves, outcome };
  const trajectory = recorder.trajectory({
    reward,
    metrics: { legal_moves: legalMoves, win: outcome === 'win' ? 1 : 0, forfeit: outcome === 'forfeit' ? 1 : 0 },
    metadata: { gameSeed: opts.gameSeed, outcome },
  });
  return { trajectory, result };
}
