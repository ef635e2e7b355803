#!/usr/bin/env node
/** The journal process: `csi-journal [--cluster ID] [--clusters-file FILE]`; `--help` lists every setting. */
import { runJournal } from "./run.js";

await runJournal(process.argv.slice(2), process.env);
