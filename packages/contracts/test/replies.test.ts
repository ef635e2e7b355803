/**
 * Where a responder may answer: only inboxes (`_INBOX.…`, each role's `_INBOX.<user>`) and
 * account-mapped replies (`_R_.…`); never a stream's subject.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { inboxPrefix, isReplySubject, natsRoles, REPLY_SUBJECT_PREFIXES, subjects } from "../src/index.js";

test("every role's inbox, and a reply mapped across accounts, may be answered", () => {
  for (const role of natsRoles(["c1"], ["node-a.example"])) assert.ok(isReplySubject(`${inboxPrefix(role)}.Xy7.3`), inboxPrefix(role));
  assert.ok(isReplySubject("_INBOX.abc"));
  assert.ok(isReplySubject("_R_.pZt1Ig.S2tP9Q"));
  assert.deepEqual([...REPLY_SUBJECT_PREFIXES], ["_INBOX.", "_R_."]);
});

test("a stream's subject, or anything that is not an inbox, may not", () => {
  const uuid = "36eaa70e-eb63-11ea-8e79-246e96907f74";
  for (const reply of [
    undefined,
    "",
    subjects.volumeEvents("c1", uuid),
    subjects.reports("c1", "node-a", uuid),
    "csi.nodes.bm9kZS1h",
    "csi.nodework.bm9kZS1h",
    "$JS.API.STREAM.INFO.CSI_EVENTS_c1",
    "_INBOX.",
    "_INBOX",
    "_R_.",
    "_inbox.abc",
    "x._INBOX.abc",
    "_INBOX..abc",
    "_INBOX.>",
    "_INBOX.*",
    "_INBOX.a b",
    "_INBOX.a\u0000b",
  ]) {
    assert.equal(isReplySubject(reply), false, JSON.stringify(reply));
  }
});
