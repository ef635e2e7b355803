/**
 * Entry `@csi/journal/test-support`: events and names for the tests and the benchmark (never
 * built into dist/: types and sources only). The deciders' spec helper (spec.ts) is imported by
 * the deciders' tests beside them.
 */
export { events, GRP, SNAP, T0, VOL, volumeReservedBody } from "./fixtures.js";
