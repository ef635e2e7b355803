/**
 * METRICS_ADDR: where a service's ops listener (/metrics, /healthz, /readyz) binds. Pure.
 *
 *   "127.0.0.1:9810" loopback, port 9810 (the default: config.ts, opsShape)
 *   "127.0.0.1:0"    loopback, any free port (tests and `npm start`: many processes on one machine)
 *   "10.1.2.3:9812"  one address (Kubernetes: the pod IP, "$(POD_IP):9812" from status.podIP)
 *   "0.0.0.0:9810"   all IPv4 interfaces, port 9810
 *   "[::]:9810"      all IPv6 interfaces
 *   ":9810"          all interfaces (0.0.0.0), as before the default became loopback
 *   "off"            no listener
 */

export type ListenAddr = { off: true } | { off: false; host: string; port: number };

const HOST_PORT = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]*)):([0-9]{1,5})$/;

/** The address METRICS_ADDR names, or a one-line reason it is not one. */
export function parseListenAddr(text: string): ListenAddr | { error: string } {
  const s = text.trim();
  if (s === "off") return { off: true };
  const m = HOST_PORT.exec(s);
  if (!m) return { error: 'must be "host:port" (port 0 = any free port) or "off"' };
  const port = Number(m[3]);
  if (port > 65_535) return { error: `port ${port} is out of range (0-65535)` };
  const host = m[1] ?? (m[2] || "0.0.0.0");
  return { off: false, host, port };
}

/** The URL a local client reaches a listener at: a wildcard bind is reached on loopback. */
export function localUrl(host: string, port: number): string {
  const h = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
  return `http://${h.includes(":") ? `[${h}]` : h}:${port}`;
}
