/**
 * What Kubernetes tells the driver about the objects behind a call, so that a volume's history
 * names them (docs/deploy.md, "Who asked: PVC, VolumeSnapshot, pod"):
 *
 *   CreateVolume `parameters` (external-provisioner --extra-create-metadata):
 *     csi.storage.k8s.io/pvc/name, csi.storage.k8s.io/pvc/namespace, csi.storage.k8s.io/pv/name
 *   CreateSnapshot `parameters` (external-snapshotter --extra-create-metadata):
 *     csi.storage.k8s.io/volumesnapshot/name, …/volumesnapshot/namespace, …/volumesnapshotcontent/name
 *   NodePublishVolume `volume_context` (CSIDriver podInfoOnMount: true, set by the kubelet):
 *     csi.storage.k8s.io/pod.name, …/pod.namespace, …/pod.uid, …/serviceAccount.name, …/ephemeral
 *
 * These are metadata, never part of what a repeated create must match: the controller takes every
 * `csi.storage.k8s.io/` key out of the parameters it sends (splitParameters), so the journal's
 * digest never sees them, and carries the known ones beside them. Each value is checked as
 * Kubernetes checks the object's field (names: DNS-1123 subdomains of at most 253 characters;
 * namespaces: DNS-1123 labels of at most 63); a bad one is INVALID_ARGUMENT naming the key, never
 * echoing the value. Any other key of the prefix (the kubelet's `serviceAccount.tokens`, a secret)
 * is never read, kept or logged.
 */
import { z } from "zod";
import { invalidArgument } from "./errors.js";

export const K8S_PREFIX = "csi.storage.k8s.io/";

/** Kubernetes' own bounds: object names (DNS-1123 subdomain) and namespaces (DNS-1123 label). */
export const K8S_NAME_MAX = 253;
export const K8S_NAMESPACE_MAX = 63;
const LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

const ObjectName = z
  .string()
  .max(K8S_NAME_MAX, `must be at most ${K8S_NAME_MAX} characters`)
  .regex(new RegExp(`^${LABEL}(\\.${LABEL})*$`), "must be a Kubernetes object name (lower-case letters, digits, '-' and '.')");
const Namespace = z
  .string()
  .max(K8S_NAMESPACE_MAX, `must be at most ${K8S_NAMESPACE_MAX} characters`)
  .regex(new RegExp(`^${LABEL}$`), "must be a Kubernetes namespace (lower-case letters, digits and '-')");
/** A pod's uid: a UUID for API pods, a hash for static pods. */
const PodUid = z
  .string()
  .max(64, "must be at most 64 characters")
  .regex(/^[0-9A-Za-z-]+$/, "must be a pod uid (letters, digits and '-')");

/** The PVC and PV a CreateVolume was made for. */
export const VolumeRequester = z.strictObject({ pvcNamespace: Namespace.optional(), pvcName: ObjectName.optional(), pvName: ObjectName.optional() });
export type VolumeRequester = z.output<typeof VolumeRequester>;

/** The VolumeSnapshot and VolumeSnapshotContent a CreateSnapshot was made for. */
export const SnapshotRequester = z.strictObject({
  volumeSnapshotNamespace: Namespace.optional(),
  volumeSnapshotName: ObjectName.optional(),
  volumeSnapshotContentName: ObjectName.optional(),
});
export type SnapshotRequester = z.output<typeof SnapshotRequester>;

/** The pod a NodePublishVolume mounts the volume for. */
export const PodInfo = z.strictObject({
  namespace: Namespace.optional(),
  name: ObjectName.optional(),
  uid: PodUid.optional(),
  serviceAccount: ObjectName.optional(),
  /** A CSI ephemeral inline volume (the kubelet says so; this driver serves Persistent ones only). */
  ephemeral: z.boolean().optional(),
});
export type PodInfo = z.output<typeof PodInfo>;

/** Each field and the key it comes from. */
const VOLUME_KEYS = { pvcNamespace: "pvc/namespace", pvcName: "pvc/name", pvName: "pv/name" } as const;
const SNAPSHOT_KEYS = {
  volumeSnapshotNamespace: "volumesnapshot/namespace",
  volumeSnapshotName: "volumesnapshot/name",
  volumeSnapshotContentName: "volumesnapshotcontent/name",
} as const;
const POD_KEYS = { namespace: "pod.namespace", name: "pod.name", uid: "pod.uid", serviceAccount: "serviceAccount.name", ephemeral: "ephemeral" } as const;

/**
 * The known keys of `map` as the object `schema` describes (each field from `keys`), or undefined
 * when none is there. A bad value is INVALID_ARGUMENT naming the key (`field` is the CSI field).
 */
function pick<S extends z.ZodType>(schema: S, keys: Record<string, string>, map: Record<string, string> | undefined, field: string): z.output<S> | undefined {
  const input: Record<string, string> = {};
  for (const [name, key] of Object.entries(keys)) {
    const v = map?.[`${K8S_PREFIX}${key}`];
    if (v !== undefined && v !== "") input[name] = v;
  }
  if (Object.keys(input).length === 0) return undefined;
  const got = schema.safeParse(input);
  if (got.success) return got.data;
  const issue = got.error.issues[0];
  throw invalidArgument(`${field} ${K8S_PREFIX}${keys[String(issue?.path[0])]}: ${issue?.message ?? "is not valid"}`);
}

/** The pod as volume_context gives it: `ephemeral` is "true" or "false". */
const PodContext = PodInfo.extend({
  ephemeral: z
    .enum(["true", "false"], "must be true or false")
    .transform((s) => s === "true")
    .optional(),
});

/** CreateVolume's PVC and PV (external-provisioner --extra-create-metadata), if it has them. */
export const volumeRequesterOf = (parameters: Record<string, string> | undefined): VolumeRequester | undefined =>
  pick(VolumeRequester, VOLUME_KEYS, parameters, "parameters");

/** CreateSnapshot's VolumeSnapshot and its content (external-snapshotter --extra-create-metadata), if it has them. */
export const snapshotRequesterOf = (parameters: Record<string, string> | undefined): SnapshotRequester | undefined =>
  pick(SnapshotRequester, SNAPSHOT_KEYS, parameters, "parameters");

/** NodePublishVolume's pod (CSIDriver podInfoOnMount), if the kubelet gave it. */
export const podInfoOf = (volumeContext: Record<string, string> | undefined): PodInfo | undefined =>
  pick(PodContext, POD_KEYS, volumeContext, "volume_context");

/** "ns/name", "name" or "" — how a namespaced object is named in one line. */
export const namespacedName = (namespace: string | undefined, name: string | undefined): string =>
  name === undefined ? "" : namespace === undefined ? name : `${namespace}/${name}`;
