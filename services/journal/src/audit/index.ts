/**
 * The audit (room door, `@csi/journal/audit`): replay to a point, verify, history and gc — the
 * pure findings and gc deciders (findings.ts) and the commands that read the log, the pools and
 * the nodes for them (audit.ts). Its suites: findings.test.ts beside it, test/audit.test.ts.
 */
export { Audit, type AuditDeps, type HeartbeatReader } from "./audit.js";
export { type Heartbeat, inspect } from "./findings.js";
