import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { findByMountPoint, type MountEntry, parseMountInfo, unescapeMountField } from "./mountinfo.js";

const SAMPLE = [
  "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard",
  "24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334492k,nr_inodes=3083623,mode=755",
  "42 27 7:0 / /var/lib/kubelet/plugins/csi/staging/vol\\0401 rw,noatime shared:40 - ext4 /dev/loop0 rw",
  "43 27 7:0 /data /var/lib/kubelet/pods/p1/volumes/vol ro,relatime shared:40 master:3 - ext4 /dev/loop0 rw",
  "44 27 0:27 / /tmp/tab\\011nl\\012bs\\134 rw - tmpfs  rw",
  "45 42 0:28 / /var/lib/kubelet/plugins/csi/staging/vol\\0401/sub rw - tmpfs tmpfs ro,size=4k",
  "46 27 7:1 / /var/lib/kubelet/plugins/csi/staging/vol\\0401 rw - xfs /dev/loop1 rw,attr2,inode64",
].join("\n");

describe("parseMountInfo", () => {
  const entries = parseMountInfo(`${SAMPLE}\n`);

  it("reads one entry per line", () => assert.equal(entries.length, 7));

  const cases: [string, number, Partial<MountEntry>][] = [
    [
      "root filesystem with an optional field",
      0,
      {
        mountId: 27,
        parentId: 1,
        majorMinor: "254:0",
        root: "/",
        mountPoint: "/",
        options: ["rw", "relatime"],
        optionalFields: ["shared:1"],
        fsType: "ext4",
        source: "/dev/vda",
        superOptions: ["rw", "discard"],
      },
    ],
    ["pseudo filesystem, no optional fields", 1, { mountPoint: "/dev", optionalFields: [], fsType: "devtmpfs", source: "devtmpfs" }],
    [
      "loop device source, a path with a space (\\040)",
      2,
      { majorMinor: "7:0", mountPoint: "/var/lib/kubelet/plugins/csi/staging/vol 1", source: "/dev/loop0", options: ["rw", "noatime"], fsType: "ext4" },
    ],
    [
      "bind mount of a sub-directory, two optional fields",
      3,
      { root: "/data", mountPoint: "/var/lib/kubelet/pods/p1/volumes/vol", options: ["ro", "relatime"], optionalFields: ["shared:40", "master:3"] },
    ],
    ["tab, newline and backslash escapes, an empty source", 4, { mountPoint: "/tmp/tab\tnl\nbs\\", fsType: "tmpfs", source: "", superOptions: ["rw"] }],
  ];
  for (const [name, i, want] of cases) {
    it(name, () => {
      const got = entries[i];
      assert.ok(got);
      for (const [k, v] of Object.entries(want)) assert.deepEqual(got[k as keyof MountEntry], v, k);
    });
  }

  for (const [name, line] of [
    ["no separator", "27 1 254:0 / / rw,relatime shared:1 ext4 /dev/vda rw"],
    ["too short", "27 1 254:0 / /"],
    ["non-numeric id", "x 1 254:0 / / rw - ext4 /dev/vda rw"],
    ["nothing after the separator", "27 1 254:0 / / rw - ext4"],
  ] as const) {
    it(`rejects a malformed line: ${name}`, () => assert.throws(() => parseMountInfo(line), { name: "DriverError", code: "Internal" }));
  }
});

describe("unescapeMountField", () => {
  for (const [raw, want] of [
    ["/a\\040b", "/a b"],
    ["\\011\\012\\134", "\t\n\\"],
    ["/plain", "/plain"],
    ["/not\\04an-escape", "/not\\04an-escape"],
  ] as const) {
    it(`${raw} → ${JSON.stringify(want)}`, () => assert.equal(unescapeMountField(raw), want));
  }
});

describe("findByMountPoint", () => {
  const entries = parseMountInfo(SAMPLE);
  it("returns the visible (last) of stacked mounts", () => assert.equal(findByMountPoint(entries, "/var/lib/kubelet/plugins/csi/staging/vol 1")?.mountId, 46));
  it("ignores a trailing slash", () => assert.equal(findByMountPoint(entries, "/dev/")?.mountId, 24));
  it("finds nothing at a plain directory", () => assert.equal(findByMountPoint(entries, "/var/lib/kubelet"), undefined));
});
