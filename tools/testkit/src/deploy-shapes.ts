/**
 * The shapes the deploy checks read (deploy-checks.ts, sidecar-checks.ts, compose-keys.ts): the
 * fields of Kubernetes objects and of docker-compose.yml they look at, nothing more.
 */

// Kubernetes objects (only the fields the checks read).
export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: {
    configMapKeyRef?: { name: string; key: string; optional?: boolean };
    secretKeyRef?: { name: string; key: string; optional?: boolean };
    fieldRef?: { fieldPath: string };
  };
}
export interface Probe {
  httpGet?: { path: string; port: number | string };
}
export interface Container {
  name: string;
  image?: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  envFrom?: unknown[];
  ports?: { name?: string; containerPort: number }[];
  volumeMounts?: { name: string; mountPath: string; mountPropagation?: string; readOnly?: boolean }[];
  livenessProbe?: Probe;
  readinessProbe?: Probe;
  securityContext?: { privileged?: boolean; allowPrivilegeEscalation?: boolean };
}
export interface Volume {
  name: string;
  hostPath?: { path: string } | null;
  emptyDir?: object;
  configMap?: { name: string; items?: { key: string; path: string }[] };
  persistentVolumeClaim?: { claimName: string };
}
export interface PodSpec {
  serviceAccountName?: string;
  shareProcessNamespace?: boolean;
  terminationGracePeriodSeconds?: number;
  initContainers?: Container[];
  containers: Container[];
  volumes?: Volume[];
}
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; annotations?: Record<string, string> };
  // biome-ignore lint/suspicious/noExplicitAny: the shapes differ per kind; each check reads its own fields
  [field: string]: any;
}

export interface Pod {
  where: string;
  kind: string;
  replicas: number | undefined;
  annotations: Record<string, string>;
  labels: Record<string, string>;
  spec: PodSpec;
}

// docker-compose.yml

export interface ComposeService {
  build?: string | { context: string };
  command?: string[];
  environment?: Record<string, string> | string[];
  volumes?: (string | { source: string; target: string })[];
  stop_grace_period?: string;
  init?: boolean;
}
export interface Compose {
  services: Record<string, ComposeService>;
}
