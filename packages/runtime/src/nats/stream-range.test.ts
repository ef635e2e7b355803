import assert from "node:assert/strict";
import { test } from "node:test";
import { streamSeqOfReply } from "./stream-range.js";

test("the stream sequence of a delivery comes from its $JS.ACK reply subject, in both layouts", () => {
  assert.equal(streamSeqOfReply("$JS.ACK.CSI_c1.read_abc.1.4711.4711.1700000000000000000.3", "read_abc"), 4711);
  assert.equal(streamSeqOfReply("$JS.ACK.hub.ACCHASH.CSI_c1.read_abc.2.99.98.1700000000000000000.0.tok", "read_abc"), 99);
  assert.equal(streamSeqOfReply("$JS.ACK.CSI_c1.other.1.5.5.17.0", "read_abc"), undefined, "another consumer's delivery");
  assert.equal(streamSeqOfReply("_INBOX.x.read_abc.1.5", "read_abc"), undefined, "not an ack subject");
});
