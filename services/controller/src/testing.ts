/**
 * Entry `@csi/controller/testing`: for the tests (test/, tools/testkit's deployment checks) — the
 * controller's settings table, its node directory and how it reads class parameters. Nothing of
 * the running service imports it. When a module moves inside the controller, only this list changes.
 */

export { NodeDirectory } from "./adapters/nodes.js";
export { CONTROLLER_SETTINGS } from "./config.js";
export { createLimits, splitParameters } from "./domain/csi.js";
export { type RunningMux, startPluginMux } from "./plugin/mux.js";
