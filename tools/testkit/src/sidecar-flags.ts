/**
 * The flags each kubernetes-csi sidecar image of the manifests accepts, per pinned version: what
 * its `--help` documents, i.e. the flags its main registers (cmd/<sidecar>/*.go), those of
 * csi-lib-utils' standardflags (RegisterCommonFlags, AddAutomaxprocs) where it calls them, and
 * those of Kubernetes' component-base logging (logsapi.AddGoFlags, with the JSON format
 * registered), as read in each sidecar's repository (kubernetes-csi/<repo>, the newest stored
 * source) and its release notes up to the pinned version. The READMEs' "Command line options" are
 * a subset (external-provisioner's omits --default-fstype, external-snapshotter's is shared with
 * the snapshot-controller and omits --extra-create-metadata), so they are not the list.
 *
 * deploy-checks.ts refuses a flag not listed for the image's version, and an image version with no
 * list: bumping a sidecar means reading its release notes and adding its version here.
 */

/** Kubernetes' component-base logging flags (every sidecar). */
const LOGGING = [
  "v",
  "vmodule",
  "logging-format",
  "log-flush-frequency",
  "log-text-split-stream",
  "log-text-info-buffer-size",
  "log-json-split-stream",
  "log-json-info-buffer-size",
];
/** csi-lib-utils standardflags.RegisterCommonFlags (+ AddAutomaxprocs). */
const COMMON = [
  "version",
  "kubeconfig",
  "csi-address",
  "leader-election",
  "leader-election-namespace",
  "leader-election-lease-duration",
  "leader-election-renew-deadline",
  "leader-election-retry-period",
  "leader-election-labels",
  "kube-api-qps",
  "kube-api-burst",
  "http-endpoint",
  "metrics-address",
  "metrics-path",
  "automaxprocs",
];

/** What the controller-side sidecars (provisioner, attacher, resizer, snapshotter) each register besides COMMON. */
const CONTROLLER_SIDE = [...LOGGING, ...COMMON, "feature-gates", "timeout", "retry-interval-start", "retry-interval-max"];

const PROVISIONER = [
  ...CONTROLLER_SIDE,
  "master",
  "worker-threads",
  "volume-name-prefix",
  "volume-name-uuid-length",
  "strict-topology",
  "immediate-topology",
  "extra-create-metadata",
  "default-fstype",
  "enable-capacity",
  "capacity-ownerref-level",
  "capacity-threads",
  "capacity-poll-interval",
  "capacity-for-immediate-binding",
  "kube-api-capacity-qps",
  "kube-api-capacity-burst",
  "cloning-protection-threads",
  "snapshot-orphan-sweep-interval",
  "enable-pprof",
  "node-deployment",
  "node-deployment-immediate-binding",
  "node-deployment-base-delay",
  "node-deployment-max-delay",
  "controller-publish-readonly",
  "prevent-volume-mode-conversion",
];
const ATTACHER = [...CONTROLLER_SIDE, "worker-threads", "max-entries", "max-grpc-log-length", "reconcile-sync", "resync", "default-fstype"];
const RESIZER_2_2 = [...CONTROLLER_SIDE, "master", "workers", "resync-period", "handle-volume-inuse-error", "extra-modify-metadata"];
const SNAPSHOTTER = [
  ...CONTROLLER_SIDE,
  "worker-threads",
  "resync-period",
  "snapshot-name-prefix",
  "snapshot-name-uuid-length",
  "groupsnapshot-name-prefix",
  "groupsnapshot-name-uuid-length",
  "extra-create-metadata",
  "node-deployment",
];
/** node-driver-registrar registers its own flags (not standardflags' common set). */
const REGISTRAR = [
  ...LOGGING,
  "automaxprocs",
  "version",
  "csi-address",
  "kubelet-registration-path",
  "plugin-registration-path",
  "http-endpoint",
  "health-port",
  "timeout",
  "connection-timeout",
  "mode",
  "enable-pprof",
];
const LIVENESSPROBE = [...LOGGING, "automaxprocs", "csi-address", "health-port", "http-endpoint", "metrics-address", "metrics-path", "probe-timeout"];

/** `<image name>:<tag>` → its flags. */
export const SIDECAR_FLAGS: Readonly<Record<string, readonly string[]>> = {
  // CHANGELOG-6.4.md: no flag added or removed since 6.3.0.
  "csi-provisioner:v6.4.0": PROVISIONER,
  // The newest source stored (after v4.12.0); v4.13.0 is a tag other 2026 deployments pin (docs/deploy.md).
  "csi-attacher:v4.13.0": ATTACHER,
  // CHANGELOG-2.3.md: --resize-timeout and --modify-timeout added (--timeout still sets both).
  "csi-resizer:v2.3.0": [...RESIZER_2_2, "resize-timeout", "modify-timeout"],
  // CHANGELOG-8.7.md: no flag added or removed since 8.6.0.
  "csi-snapshotter:v8.7.0": SNAPSHOTTER,
  // CHANGELOG-2.20.md: dependencies only.
  "livenessprobe:v2.20.0": LIVENESSPROBE,
  // The newest source stored (after v2.17.0); v2.18.0 is pinned next to csi-attacher v4.13.0.
  "csi-node-driver-registrar:v2.18.0": REGISTRAR,
};

/** Deprecated flags the manifests must not use: each has a replacement the same version takes. */
export const DEPRECATED_SIDECAR_FLAGS: Readonly<Record<string, string>> = {
  "health-port": "--http-endpoint (livenessprobe, node-driver-registrar: `--health-port` is deprecated)",
  "metrics-address": "--http-endpoint (`--metrics-address` is deprecated)",
  "connection-timeout": "nothing (node-driver-registrar's `--connection-timeout` is deprecated and ignored)",
  mode: "nothing (node-driver-registrar's `--mode` is deprecated)",
};
