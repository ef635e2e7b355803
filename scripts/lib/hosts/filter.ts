/**
 * Partitions made with the hosts' own packet filters: each host's nftables (table `inet csih`,
 * input and output hooks) inside its namespace. A cut is data — which hosts drop everything but
 * their loopback, and which host drops what comes from which — so what it means for the links
 * between hosts (`cutLinks`) is pure, and the rules each host gets (`rulesOf`) too.
 */
import { type Host, type HostName, onHost } from "./netns.js";

export interface Cut {
  /** Hosts cut off: every packet in and out dropped but their loopback's (the root namespace loses them too). */
  offline: HostName[];
  /** `[from, to]`: `to` drops every packet that comes from `from` (its input filter). */
  drops: [HostName, HostName][];
}

export const NO_CUT: Cut = { offline: [], drops: [] };

/** The host pairs ("a-b", sorted) with no working link under a cut: TCP needs both directions. Pure. */
export function cutLinks(cut: Cut, hosts: readonly HostName[]): Set<string> {
  const out = new Set<string>();
  for (const x of hosts)
    for (const y of hosts) {
      if (x >= y) continue;
      const dropped = cut.drops.some(([f, t]) => (f === x && t === y) || (f === y && t === x));
      if (dropped || cut.offline.includes(x) || cut.offline.includes(y)) out.add(`${x}-${y}`);
    }
  return out;
}

/** The peers `h` has no working link to under a cut. Pure. */
export const cutPeersOf = (cut: Cut, h: HostName, hosts: readonly HostName[]): HostName[] =>
  hosts.filter((o) => o !== h && cutLinks(cut, hosts).has([h, o].sort().join("-")));

/** A host's nftables ruleset for a cut (replacing whatever table it had), or the removal of the table when it drops nothing. Pure. */
export function rulesOf(cut: Cut, h: HostName, addrOf: (h: HostName) => string): string {
  const reset = "add table inet csih\ndelete table inet csih\n";
  const input: string[] = [];
  const output: string[] = [];
  if (cut.offline.includes(h)) {
    input.push('iifname != "lo" drop');
    output.push('oifname != "lo" drop');
  }
  for (const [from, to] of cut.drops) if (to === h) input.push(`ip saddr ${addrOf(from)} drop`);
  if (input.length === 0 && output.length === 0) return reset;
  const chain = (name: string, hook: string, rules: string[]) =>
    `  chain ${name} {\n    type filter hook ${hook} priority 0; policy accept;\n${rules.map((r) => `    ${r}\n`).join("")}  }\n`;
  return `${reset}table inet csih {\n${chain("input", "input", input)}${chain("output", "output", output)}}\n`;
}

/** Puts a cut in place on every host (each host's whole ruleset of ours replaced at once). */
export async function applyCut(hosts: readonly Host[], cut: Cut): Promise<void> {
  const addrOf = (n: HostName) => hosts.find((h) => h.name === n)?.addr ?? "";
  await Promise.all(hosts.map((h) => onHost(h, "nft", ["-f", "-"], rulesOf(cut, h.name, addrOf))));
}

/** A cut in words: "a cut off", "a drops b's packets", "a-b cut". Pure. */
export function describeCut(cut: Cut): string {
  const parts = [...cut.offline.map((h) => `${h} cut off`), ...cut.drops.map(([f, t]) => `${t} drops ${f}'s packets`)];
  return parts.join(", ") || "no cut";
}
