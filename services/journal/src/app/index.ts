/**
 * The app (room door): the journal's commands as one object (journal.ts: each command's read,
 * decision and reply over the runner) and the table that maps each wire command to it
 * (table.ts). The rpc room serves them; the composition root (src/index.ts) builds them.
 */
export { Journal, type JournalDeps } from "./journal.js";
export type { CommandTable } from "./table.js";
