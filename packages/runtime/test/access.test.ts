import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";
import { createUser } from "@nats-io/nkeys";
import { AccessError, natsConnectOptions, redactUrl, redisConnectOptions } from "../src/access.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "csi-access-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, content: string) => {
  const f = path.join(dir, name);
  writeFileSync(f, content);
  return f;
};

describe("redactUrl", () => {
  test("strips user:password from every URL, leaves the rest", () => {
    assert.equal(redactUrl("nats://u:p%40ss@h1:4222,nats://v:q@h2:4222"), "nats://***@h1:4222,nats://***@h2:4222");
    assert.equal(redactUrl("rediss://journal:s3cret@redis:6380/0"), "rediss://***@redis:6380/0");
    assert.equal(redactUrl("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
  });
});

describe("natsConnectOptions", () => {
  test("servers, user/password, and what the caller adds", () => {
    const o = natsConnectOptions(
      { natsUrl: "nats://a:1, nats://b:2", natsUser: "controller", natsPassword: "pw" },
      { name: "x", inboxPrefix: "_INBOX.controller" },
    );
    assert.deepEqual(o.servers, ["nats://a:1", "nats://b:2"]);
    assert.equal(o.user, "controller");
    assert.equal(o.pass, "pw");
    assert.equal(o.inboxPrefix, "_INBOX.controller");
    assert.equal(o.tls, undefined);
  });
  test("an nkey seed file or a .creds file becomes an authenticator", () => {
    const seed = file("u.nk", `${new TextDecoder().decode(createUser().getSeed())}\n`);
    assert.equal(typeof natsConnectOptions({ natsUrl: "nats://a:1", natsCreds: seed }).authenticator, "function");
    const creds = file("u.creds", "-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n");
    assert.equal(typeof natsConnectOptions({ natsUrl: "nats://a:1", natsCreds: creds }).authenticator, "function");
  });
  test("TLS files: any turns TLS on", () => {
    assert.deepEqual(natsConnectOptions({ natsUrl: "nats://a:1", natsTlsCa: "/ca" }).tls, { caFile: "/ca" });
    assert.deepEqual(natsConnectOptions({ natsUrl: "nats://a:1", natsTlsCert: "/c", natsTlsKey: "/k" }).tls, { certFile: "/c", keyFile: "/k" });
  });
  test("mistakes name the variable, never a secret", () => {
    const bad: [Parameters<typeof natsConnectOptions>[0], RegExp][] = [
      [{ natsUrl: "n", natsUser: "u", natsPassword: "SECRET", natsCreds: "/x" }, /NATS_CREDS or NATS_USER/],
      [{ natsUrl: "n", natsPassword: "SECRET" }, /NATS_PASSWORD is set without NATS_USER/],
      [{ natsUrl: "n", natsTlsCert: "/c" }, /NATS_TLS_CERT and NATS_TLS_KEY go together/],
      [{ natsUrl: "n", natsCreds: path.join(dir, "missing") }, /NATS_CREDS: cannot read .*ENOENT/],
      [{ natsUrl: "n", natsCreds: file("junk", "SECRET junk") }, /neither a \.creds file nor an nkey user seed/],
    ];
    for (const [a, re] of bad)
      assert.throws(
        () => natsConnectOptions(a),
        (e: unknown) => e instanceof AccessError && re.test(e.message) && !e.message.includes("SECRET"),
      );
  });
});

describe("redisConnectOptions", () => {
  test("ACL user and password; TLS for rediss:// or a CA", () => {
    assert.deepEqual(redisConnectOptions({ redisUrl: "redis://h:1" }), {});
    assert.deepEqual(redisConnectOptions({ redisUrl: "redis://h:1", redisUsername: "journal", redisPassword: "pw" }), { username: "journal", password: "pw" });
    assert.deepEqual(redisConnectOptions({ redisUrl: "rediss://h:1" }), { tls: {} });
    const ca = file("ca.pem", "PEM");
    assert.deepEqual(redisConnectOptions({ redisUrl: "redis://h:1", redisTlsCa: ca }), { tls: { ca: "PEM" } });
  });
  test("a user without a password is a mistake", () => {
    assert.throws(() => redisConnectOptions({ redisUrl: "redis://h:1", redisUsername: "journal" }), /REDIS_USERNAME is set without REDIS_PASSWORD/);
  });
  test("Sentinel: the sentinels, the master's name (default csi), role master, reconnect on READONLY", () => {
    const o = redisConnectOptions({ redisUrl: "redis://h:1", redisSentinels: "s1:26379, [::1]:26380,10.0.0.3:26381", redisSentinelPassword: "SECRET" });
    assert.deepEqual(o.sentinels, [
      { host: "s1", port: 26379 },
      { host: "::1", port: 26380 },
      { host: "10.0.0.3", port: 26381 },
    ]);
    assert.equal(o.name, "csi");
    assert.equal(o.role, "master");
    assert.equal(o.sentinelPassword, "SECRET");
    assert.equal(o.failoverDetector, true);
    assert.equal(redisConnectOptions({ redisUrl: "redis://h:1", redisSentinels: "s:1", redisMasterName: "other" }).name, "other");
    const reconnect = o.reconnectOnError;
    assert.ok(typeof reconnect === "function");
    assert.equal(reconnect(new Error("READONLY You can't write against a read only replica.")), 2, "a demoted master: reconnect and resend");
    assert.equal(reconnect(new Error("WRONGTYPE Operation against a key")), false);
    // Without sentinels nothing of this is set: the single-server client stays as it was.
    assert.deepEqual(redisConnectOptions({ redisUrl: "redis://h:1", redisMasterName: "csi" }), {});
  });
  test("bad sentinel settings name the variable and never echo a secret", () => {
    for (const [a, re] of [
      [{ redisUrl: "redis://h:1", redisSentinels: "nohost" }, /REDIS_SENTINELS: "nohost" is not host:port/],
      [{ redisUrl: "redis://h:1", redisSentinels: "h:99999" }, /REDIS_SENTINELS: "h:99999" is not host:port/],
      [{ redisUrl: "redis://h:1", redisSentinels: " , " }, /REDIS_SENTINELS is set but names no sentinel/],
      [{ redisUrl: "redis://h:1", redisSentinelPassword: "SECRET" }, /REDIS_SENTINEL_PASSWORD is set without REDIS_SENTINELS/],
    ] as const)
      assert.throws(
        () => redisConnectOptions(a),
        (e: unknown) => e instanceof AccessError && re.test(e.message) && !e.message.includes("SECRET"),
      );
  });
});
