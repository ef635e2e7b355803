export * from "../../scripts/lib/processes.js";
