export * from "./errors.js";
export * from "./volume-id.js";
export * from "./subjects.js";
export * from "./common.js";
export * from "./journal.js";
export * from "./events.js";
export * from "./clusters.js";
export * from "./csi.js";
