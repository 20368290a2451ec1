import { describe, expect, expectTypeOf, it } from 'vitest';
import * as lib from '../src/index.js';
import type { LibraryTrajectory, McpTrajectory, Trajectory } from '../src/index.js';
import { rulerScoreGroup } from '../src/backend/ruler.js';
import { TrajectorySchema } from '../src/backend/schemas.js';
import { McpTrajectorySchema as RolloutTrajectorySchema, type McpTrajectory as RolloutTrajectory } from '../src/agent/trajectory.js';
import { rulerScores } from '../src/ruler/ruler.js';

// One name per idea in the library's index, ART's where ART has one (docs/library.md, "Names").
describe("the library's names", () => {
  it("are ART's for the library's pieces, and the MCP pipeline's own pieces say so", () => {
    expect(lib.TrajectorySchema).toBe(TrajectorySchema);
    expect(lib.rulerScoreGroup).toBe(rulerScoreGroup);
    expect(lib.McpTrajectorySchema).toBe(RolloutTrajectorySchema);
    expect(lib.rulerScores).toBe(rulerScores);
    expectTypeOf<Trajectory>().toEqualTypeOf<lib.TrajectoryGroup['trajectories'][number]>();
    expectTypeOf<McpTrajectory>().toEqualTypeOf<RolloutTrajectory>();
  });

  it('keep the earlier names of the library pieces as aliases', () => {
    expect(lib.ruler).toBe(rulerScoreGroup);
    expect(lib.LibraryTrajectorySchema).toBe(TrajectorySchema);
    expectTypeOf<LibraryTrajectory>().toEqualTypeOf<Trajectory>();
  });
});
