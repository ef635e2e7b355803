/**
 * The claim check of node work (docs/security.md, "Node work"): before the agent runs work that
 * uses a volume (stage, publish, limits), it asks the volume's cluster's journal whether this node
 * holds a claim on it, on its own subject (`subjects.claims`: its account can ask as itself only).
 * No answer, or the journal's error: Unavailable (the work is delivered again later).
 */
import { ClaimAnswer, DriverError, decomposeVolumeId, quote, subjects } from "@csi/contracts";
import type { NatsConnection } from "@nats-io/transport-node";

const CLAIM_CHECK_TIMEOUT_MS = 5_000;

/** Whether `nodeId` holds a claim on the volume a CSI id names, as its cluster's journal says. */
export function claimChecker(nc: NatsConnection, nodeId: string, timeoutMs = CLAIM_CHECK_TIMEOUT_MS): (volumeId: string) => Promise<boolean> {
  return async (volumeId) => {
    const { clusterID, uuid } = decomposeVolumeId(volumeId);
    const what = `this node's claim on volume ${uuid} (cluster ${quote(clusterID, 64)})`;
    const reply = await nc.request(subjects.claims(clusterID, nodeId), JSON.stringify({ uuid }), { timeout: timeoutMs }).catch((err: unknown) => {
      throw new DriverError("Unavailable", `cannot ask the journal for ${what}: ${(err as Error).message}`);
    });
    let raw: unknown;
    try {
      raw = reply.json();
    } catch {
      raw = undefined;
    }
    const answer = ClaimAnswer.safeParse(raw);
    if (!answer.success) throw new DriverError("Unavailable", `the journal's answer about ${what} is not a claim answer`);
    if ("error" in answer.data) throw new DriverError("Unavailable", `the journal could not say ${what}: ${answer.data.error}`);
    return answer.data.claimed;
  };
}
