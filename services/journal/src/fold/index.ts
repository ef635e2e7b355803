/**
 * The fold and its shapes (room door, `@csi/journal/fold`): what an aggregate is and where it
 * lives (its address), the fold of log records into states, the fold up to a point (replay), the
 * kinds' table. Pure; everything else in the journal stands on it. Its suite: the fold's own
 * tests beside it (evolve.test.ts) and the log invariants' (../log/invariants.test.ts).
 */
export { type Address, addressKey } from "./address.js";
export { type Aggregate, addressOfState, Fold, foldInto, type States, type Trail } from "./evolve.js";
export { type ImageKind, KINDS, uuidSubjects } from "./kinds.js";
export { emptyReplay, replayInto } from "./replay.js";
