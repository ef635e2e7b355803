/**
 * Where a responder may answer (docs/security.md, "Replies go only to inboxes"). NATS delivers a
 * request with whatever reply subject the requester set, and neither the server nor the client
 * checks it against the requester's permissions: a reply subject `csi.<c>.evt.vol.<uuid>` would
 * have the responder write its answer into an event stream. So every responder (the journal's
 * commands and its service discovery) answers only onto
 *   - `_INBOX.…`: the requesters' reply inboxes (each role's is `_INBOX.<user>`: `inboxPrefix` in
 *     permissions.ts), and
 *   - `_R_.…`: the reply subject nats-server puts in place of the requester's when a request
 *     crosses an account boundary through a service import,
 * and drops any other request unanswered (a log line and a metric at the responder). Defence in
 * depth under the accounts: no stream of ours takes subjects under these prefixes.
 */

/** The prefixes a reply subject may start with. */
export const REPLY_SUBJECT_PREFIXES = ["_INBOX.", "_R_."] as const;

/** Whether a responder may publish its answer on `reply`: an inbox or an account-mapped reply, one or more tokens after the prefix. */
export function isReplySubject(reply: string | undefined): reply is string {
  if (!reply) return false;
  const prefix = REPLY_SUBJECT_PREFIXES.find((p) => reply.startsWith(p));
  if (!prefix || reply.length === prefix.length) return false;
  // A subject of plain tokens: no empty token, no wildcard, no whitespace or control character.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what we reject
  return reply.split(".").every((t) => t.length > 0 && t !== "*" && t !== ">") && !/[\s\u0000-\u001f\u007f]/u.test(reply);
}
