/**
 * `completion bash|zsh`: the completion script of csictl's own command tree (domain/completion.ts
 * writes it). Commander has no completion of its own; the tree it holds is all a script needs.
 */
import type { Command, Option } from "commander";
import { bashCompletion, type CompletionCommand, type CompletionOption, zshCompletion } from "../domain/completion.js";

const HELP: CompletionOption = { flags: ["-h", "--help"], takesValue: false };

function optionOf(o: Option): CompletionOption {
  return { flags: [o.short, o.long].filter((f): f is string => !!f), takesValue: o.required || o.optional, choices: o.argChoices };
}

function treeOf(cmd: Command, root: boolean): CompletionCommand {
  return {
    name: cmd.name(),
    // The program's own options are the global ones: every command gets them (below).
    options: root ? [HELP, { flags: ["-V", "--version"], takesValue: false }] : [...cmd.options.filter((o) => !o.hidden).map(optionOf), HELP],
    commands: cmd.commands.map((c) => treeOf(c, false)),
  };
}

export function completionScript(program: Command, shell: "bash" | "zsh"): string {
  // The program's options but --version (commander keeps it among them): global, everywhere.
  const globals = program.options.filter((o) => !o.hidden && o.long !== "--version").map(optionOf);
  const tree = treeOf(program, true);
  return shell === "bash" ? bashCompletion(tree, globals) : zshCompletion(tree, globals);
}
