/**
 * A connect that fails leaves no socket behind. nats.js (3.x) does leave one: when its `timeout`
 * passes before the server's INFO arrives (a frozen nats-server, a listener that never writes, a
 * --timeout shorter than the handshake), the connect rejects but its transport goes on waiting
 * for the INFO, and closing it is a no-op as it never connected (nats-io/nats.js#64) — the socket
 * would keep csictl alive for minutes. Node publishes every client socket it creates on the
 * `net.client.socket` diagnostics channel; those created within the connect's own async context
 * are the connect's, and they are destroyed when it fails. Nothing of nats.js's internals is used.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { subscribe } from "node:diagnostics_channel";
import type { Socket } from "node:net";

const opening = new AsyncLocalStorage<Socket[]>();
subscribe("net.client.socket", (message) => {
  opening.getStore()?.push((message as { socket: Socket }).socket);
});

/** `connect()`, and if it rejects, every client socket it opened destroyed before the rejection is passed on. */
export async function closingWhatFails<T>(connect: () => Promise<T>): Promise<T> {
  const sockets: Socket[] = [];
  try {
    return await opening.run(sockets, connect);
  } catch (err) {
    for (const s of sockets) s.destroy();
    throw err;
  }
}
