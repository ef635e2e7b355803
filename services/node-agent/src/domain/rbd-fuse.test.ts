import assert from "node:assert/strict";
import { test } from "node:test";
import { confPath, fuseDir, fuseImagePath, isDeadMount, parseStatFailures, rbdFuseArgs, rbdFuseConf } from "./rbd-fuse.js";

const img = {
  clusterID: "c1",
  poolID: 2,
  cephPool: "kube",
  user: "csi",
  monitors: ["[v2:10.0.0.1:3300,v1:10.0.0.1:6789]", "10.0.0.2:6789"],
  keyFile: "/etc/csi-ceph/userKey",
  imageName: "csi-vol-0f8e0c4e-0000-4000-8000-000000000001",
};

test("rbd-fuse: one directory per image under the agent's rbd directory, the image its only file; one ceph.conf per pool", () => {
  assert.equal(fuseDir("/var/lib/csi/node/rbd", img), `/var/lib/csi/node/rbd/c1-2-${img.imageName}`);
  assert.equal(fuseImagePath("/var/lib/csi/node/rbd", img), `/var/lib/csi/node/rbd/c1-2-${img.imageName}/${img.imageName}`);
  assert.equal(confPath("/r", img), "/r/c1-2.conf");
});

test("rbd-fuse: the ceph.conf names the key file, never a key; the command line names conf, user, pool, image", () => {
  const conf = rbdFuseConf(img);
  assert.match(conf, /^mon host = \[v2:10\.0\.0\.1:3300,v1:10\.0\.0\.1:6789\],10\.0\.0\.2:6789$/m);
  assert.match(conf, /^keyfile = \/etc\/csi-ceph\/userKey$/m);
  assert.match(conf, /^admin socket = $/m);
  assert.doesNotMatch(conf, /^key ?=/m);
  assert.deepEqual(rbdFuseArgs("/r/c1-2.conf", "/r/d", img), ["-c", "/r/c1-2.conf", "--id", "csi", "-p", "kube", "-r", img.imageName, "/r/d"]);
});

test("rbd-fuse: a key file path that ceph.conf would read otherwise is refused", () => {
  for (const keyFile of ["relative/key", "/etc/key\nkey = AQ==", "/etc/key;x", "/etc/#key"])
    assert.throws(
      () => rbdFuseConf({ ...img, keyFile }),
      (e: { code: string }) => e.code === "FailedPrecondition",
    );
});

test("rbd-fuse: stat's complaints name the dead mounts", () => {
  const stderr = [
    "stat: cannot read file system information for '/r/c1-2-csi-vol-a': Transport endpoint is not connected",
    "stat: cannot statx '/r/c1-2-csi-vol-b': No such file or directory",
    "something else",
  ].join("\n");
  const failures = parseStatFailures(stderr);
  assert.deepEqual([...failures.keys()], ["/r/c1-2-csi-vol-a", "/r/c1-2-csi-vol-b"]);
  assert.equal(isDeadMount(failures.get("/r/c1-2-csi-vol-a") ?? ""), true);
  assert.equal(isDeadMount(failures.get("/r/c1-2-csi-vol-b") ?? ""), false);
});
