import assert from "node:assert/strict";
import { test } from "node:test";
import type { Claim } from "@csi/contracts";
import { decideClaim } from "./claims.js";

const c = (nodeId: string, accessMode: Claim["accessMode"], readOnly = false): Claim => ({ nodeId, accessMode, accessType: "mount", readOnly });
const room = { nodeVolumes: 0, maxVolumes: 0 };

const table: [string, Claim[], Claim, string][] = [
  ["first claim", [], c("n1", "SINGLE_NODE_WRITER"), "new"],
  ["same claim again (idempotent)", [c("n1", "SINGLE_NODE_WRITER")], c("n1", "SINGLE_NODE_WRITER"), "exists"],
  ["same node, read-only mismatch", [c("n1", "SINGLE_NODE_WRITER")], c("n1", "SINGLE_NODE_WRITER", true), "AlreadyExists"],
  ["same node, other mode", [c("n1", "SINGLE_NODE_WRITER")], c("n1", "SINGLE_NODE_READER_ONLY", true), "AlreadyExists"],
  ["single-node volume to a second node", [c("n1", "SINGLE_NODE_WRITER")], c("n2", "SINGLE_NODE_WRITER"), "FailedPrecondition"],
  ["single-node ask while multi-node claims exist", [c("n1", "MULTI_NODE_READER_ONLY", true)], c("n2", "SINGLE_NODE_READER_ONLY", true), "FailedPrecondition"],
  ["multi-node readers", [c("n1", "MULTI_NODE_READER_ONLY", true)], c("n2", "MULTI_NODE_READER_ONLY", true), "new"],
  ["multi-node single writer: second writer", [c("n1", "MULTI_NODE_SINGLE_WRITER")], c("n2", "MULTI_NODE_SINGLE_WRITER"), "FailedPrecondition"],
  ["multi-node single writer: a reader beside the writer", [c("n1", "MULTI_NODE_SINGLE_WRITER")], c("n2", "MULTI_NODE_SINGLE_WRITER", true), "new"],
  ["multi-node multi writer", [c("n1", "MULTI_NODE_MULTI_WRITER")], c("n2", "MULTI_NODE_MULTI_WRITER"), "new"],
];

for (const [name, existing, ask, want] of table) {
  test(`claims: ${name} → ${want}`, () => {
    const v = decideClaim(existing, ask, room);
    assert.equal(v.kind === "refused" ? v.code : v.kind, want);
  });
}

test("claims: a node at its maximum is ResourceExhausted, but an existing claim is still idempotent", () => {
  assert.equal((decideClaim([], c("n1", "SINGLE_NODE_WRITER"), { nodeVolumes: 2, maxVolumes: 2 }) as { code: string }).code, "ResourceExhausted");
  assert.equal(decideClaim([c("n1", "SINGLE_NODE_WRITER")], c("n1", "SINGLE_NODE_WRITER"), { nodeVolumes: 2, maxVolumes: 2 }).kind, "exists");
  assert.equal(decideClaim([], c("n1", "SINGLE_NODE_WRITER"), { nodeVolumes: 5, maxVolumes: 0 }).kind, "new");
});
