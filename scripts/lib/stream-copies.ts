/**
 * Whether the replicas of a replicated JetStream stream hold the same log: each node's copy
 * (ha-servers.ts, streamCopiesOf) compared sequence by sequence. Raft should make them equal; on
 * nats-server 2.9.10 a SIGKILLed stream leader, restarted, keeps a log of its own from the kill
 * on (docs/operations.md, "The replicas of a stream diverge on 2.9.10"). Pure.
 */

import { createHash } from "node:crypto";

/** One node's copy of a stream: what it holds at each sequence (recordOf). */
export type StreamCopy = Map<number, string>;

/** A record as a copy keeps it: its subject and a digest of its data. */
export const recordOf = (subject: string, data: Uint8Array | string): string => `${subject} ${createHash("sha256").update(data).digest("hex").slice(0, 16)}`;

/** How each copy differs from the first readable one: how many sequences, and the first of them; a copy that could not be read says so. */
export function copiesDisagree(copies: readonly { name: string; copy: StreamCopy | undefined }[]): string[] {
  const readable = copies.filter((c): c is { name: string; copy: StreamCopy } => c.copy !== undefined);
  const [base] = readable;
  const out = copies.filter((c) => c.copy === undefined).map((c) => `${c.name}: its copy could not be read (it never became the leader)`);
  if (!base) return out;
  for (const { name, copy } of readable.slice(1)) {
    const seqs = [...new Set([...base.copy.keys(), ...copy.keys()])].sort((a, b) => a - b);
    const differ = seqs.filter((s) => base.copy.get(s) !== copy.get(s));
    const [first] = differ;
    if (first === undefined) continue;
    const at = (c: StreamCopy) => c.get(first) ?? "nothing";
    out.push(
      `${name} differs from ${base.name} at ${differ.length} of ${seqs.length} sequences (last ${Math.max(...base.copy.keys(), 0)} vs ${Math.max(...copy.keys(), 0)}), from ${first}: ${at(base.copy)} vs ${at(copy)}`,
    );
  }
  return out;
}
