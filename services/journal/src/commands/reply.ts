/** How a paged reply is cut to fit the connection's max payload: shared by the journal's reads and the audit's. */
import { jsonBytes, replyBudget, takeWithin } from "@csi/contracts";

/**
 * A page cut so that its encoded reply stays under `maxPayload` (less headroom for the envelope;
 * undefined: NATS's 1 MiB): the entries that fit, and the token to go on from — the last one kept
 * when the page was cut, else `next` (where the store's page ended).
 */
export function fitReply<T>(
  maxPayload: number | undefined,
  entries: T[],
  tokenOf: (e: T) => string,
  next: string | undefined,
): { entries: T[]; nextToken?: string } {
  const { taken, cut } = takeWithin(entries, (e) => jsonBytes(e) + 1, replyBudget(maxPayload));
  const last = taken[taken.length - 1];
  const token = cut && last ? tokenOf(last) : next;
  return token ? { entries: taken, nextToken: token } : { entries: taken };
}
