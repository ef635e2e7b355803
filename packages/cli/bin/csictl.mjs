#!/usr/bin/env node
// csictl from a fresh clone, no build step: register tsx's loader, then run the TypeScript entry.
import { register } from "tsx/esm/api";

register();
await import("../src/main.ts");
