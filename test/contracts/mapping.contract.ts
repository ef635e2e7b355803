/**
 * What every mapping of the node-agent (services/node-agent/src/ports/mapping.ts) does, as one
 * suite run against each implementation (test/mapping.test.ts: the loop mapping over files of a
 * file pool, the rbd-fuse + loop mapping on a real single-node Ceph): map makes a device of the
 * image's size, a second map is the same device, unmap takes away only what the volume's map made,
 * unmap of a volume with nothing mapped is a no-op, and a new instance (as after a restart) finds
 * what an earlier one made, says when what carries a device broke, and maps it again with its data.
 * Every assertion reads the machine itself (losetup, the device's size and bytes), not the mapping.
 */
import assert from "node:assert/strict";
import { open } from "node:fs/promises";
import { after, before, describe, test } from "node:test";
import { MiB } from "@csi/contracts";
import { type BlockMapping, blockDeviceSize, list, type MappedVolume, type VolumeImage } from "@csi/node-agent/testing";

/** One mapping under test, with the ways to make images for it and to break what it made. */
export interface MappingUnderTest {
  /** The mapping, prepared. */
  mapping: BlockMapping;
  /** A new image of `bytes` in the mapping's pool. */
  newImage(bytes: number): Promise<VolumeImage>;
  /** A second instance over the same directories (prepared), as a restarted agent makes. */
  restarted(): Promise<BlockMapping>;
  /** Break what carries the volume's device as a crash would (the loop device detached behind the agent's back; rbd-fuse SIGKILLed). */
  breakCarrier(v: MappedVolume, device: string): Promise<void>;
  /** A device of the machine that is not this mapping's (a loop device over another file), taken down by close. */
  foreignDevice(): Promise<string>;
  close(): Promise<void>;
}

/** The devices the kernel shows mapping `imagePath` (losetup). */
async function devicesOf(imagePath: string): Promise<string[]> {
  return (await list()).filter((d) => d.backingFile === imagePath).map((d) => d.device);
}

async function writeAt(device: string, offset: number, data: Buffer): Promise<void> {
  const fh = await open(device, "r+");
  try {
    await fh.write(data, 0, data.length, offset);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

async function readAt(device: string, offset: number, length: number): Promise<Buffer> {
  const fh = await open(device, "r");
  try {
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, offset);
    return buf;
  } finally {
    await fh.close();
  }
}

export function mappingContract(label: string, open: () => Promise<MappingUnderTest>): void {
  describe(`mapping contract: ${label}`, () => {
    let t: MappingUnderTest;
    let m: BlockMapping;
    const mapped: MappedVolume[] = [];
    /** A volume of a new image of `bytes`, located by the mapping (not mapped). */
    const volume = async (bytes = 8 * MiB): Promise<MappedVolume> => {
      const image = await t.newImage(bytes);
      const v = { volumeId: image.volumeId, imagePath: await m.locate(image), readOnly: false };
      mapped.push(v);
      return v;
    };
    before(async () => {
      t = await open();
      m = t.mapping;
    });
    after(async () => {
      for (const v of mapped) await m?.unmap(v).catch(() => {});
      await t?.close();
    });

    test("map makes a block device of the image's size, found again by find, serving it", async () => {
      const v = await volume(12 * MiB);
      assert.equal(await m.find(v), undefined, "nothing mapped before map");
      const { device, made } = await m.map(v);
      assert.equal(made, true);
      assert.match(device, /^\/dev\//);
      assert.equal(await blockDeviceSize(device), 12 * MiB);
      assert.equal(await m.find(v), device);
      assert.deepEqual(await m.condition(v), { device, abnormal: undefined });
      assert.equal((await m.health([v])).get(v.volumeId), "up");
      assert.ok(
        (await m.seen([v], "all")).devices.some((d) => d.device === device),
        "seen shows the device",
      );
    });

    test("map twice is idempotent: the same device, nothing more attached", async () => {
      const v = await volume();
      const first = await m.map(v);
      const second = await m.map(v);
      assert.deepEqual(second, { device: first.device, made: false });
      assert.deepEqual(await devicesOf(v.imagePath), [first.device], "one device maps the image");
    });

    test("unmap removes only what the volume's map made: another volume and a foreign device stay", async () => {
      const a = await volume();
      const b = await volume();
      const da = (await m.map(a)).device;
      const db = (await m.map(b)).device;
      const foreign = await t.foreignDevice();
      const told: string[] = [];
      await m.unmap(a, (d) => told.push(d));
      assert.deepEqual(told, [da], "the detached device is told");
      assert.deepEqual(await devicesOf(a.imagePath), []);
      assert.equal(await m.find(a), undefined);
      assert.equal(await m.find(b), db, "the other volume keeps its device");
      assert.deepEqual(await m.condition(b), { device: db, abnormal: undefined });
      assert.ok(
        (await list()).some((d) => d.device === foreign),
        "a device that is not the mapping's is left alone",
      );
      const again = await m.map(a);
      assert.equal(again.made, true, "mapped again after unmap");
    });

    test("unmap of a volume with nothing mapped is a no-op", async () => {
      const v = await volume();
      const before = (await list()).map((d) => d.device).sort();
      const told: string[] = [];
      await m.unmap(v, (d) => told.push(d));
      await m.unmap(v, (d) => told.push(d));
      assert.deepEqual(told, []);
      // Nothing was taken away (other tests running beside this one may add loop devices meanwhile).
      const after = new Set((await list()).map((d) => d.device));
      assert.deepEqual(
        before.filter((d) => !after.has(d)),
        [],
        "every loop device there before is there after",
      );
    });

    test("after a restart: the new instance finds the device and its data; a broken carrier is reported and mapped again", async () => {
      const v = await volume();
      const { device } = await m.map(v);
      const data = Buffer.from(`mapping contract ${label} ${v.volumeId}`);
      await writeAt(device, MiB, data);
      const r = await t.restarted();
      assert.equal(await r.find(v), device, "the restarted mapping finds the device");
      assert.deepEqual(await r.map(v), { device, made: false }, "and does not map it twice");
      assert.equal((await r.health([v])).get(v.volumeId), "up");

      await t.breakCarrier(v, device);
      const broken = await r.condition(v);
      assert.ok(broken.abnormal, "the condition says the mapping is not serving the volume");
      // The healer's repair (domain/heal.ts): take down a device whose carrier is dead, then map again.
      const seen = await r.seen([v], "all");
      const stale = await r.find(v);
      if (stale !== undefined) {
        assert.ok(seen.deadCarriers.length > 0, "a device that stays is on a dead carrier, and seen says so");
        await r.release(stale, v.imagePath);
      }
      const healed = await r.map(v);
      assert.equal(healed.made, true);
      assert.equal(await blockDeviceSize(healed.device), 8 * MiB);
      assert.deepEqual(await readAt(healed.device, MiB, data.length), data, "the data, through the new mapping");
      assert.deepEqual(await r.condition(v), { device: healed.device, abnormal: undefined });
    });
  });
}
