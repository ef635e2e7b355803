/**
 * The CSI volume/snapshot ID codec, compatible with ceph-csi's CSIIdentifier:
 *
 *   <4 hex: encoding version>-<4 hex: len(clusterID)>-<clusterID>-<16 hex: pool id>-<36-char uuid>
 *
 * e.g. 0001-0024-0bba3be9-0a1c-41db-a619-26ffea20161e-0000000000000004-36eaa70e-eb63-11ea-8e79-246e96907f74
 *
 * The fixed part is 64 bytes (4+1+4+1 + 1+16+1+36), and a CSI id may be at most 128 bytes, so a
 * cluster ID is 1..64 bytes. The cluster ID is length-prefixed because it may itself contain '-'.
 */
import { DriverError } from "./errors.js";

export const VOLUME_ID_VERSION = 1;
export const MAX_ID_BYTES = 128;
const FIXED_BYTES = 64;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX4 = /^[0-9a-f]{4}$/i;
const HEX16 = /^[0-9a-f]{16}$/i;
const PRINTABLE = /^[\x21-\x7e]+$/;

export interface VolumeIdParts {
  version: number;
  clusterID: string;
  poolID: number;
  uuid: string;
}

/** A malformed ID: no volume can have it. Callers map it to NOT_FOUND (or OK on delete). */
export class VolumeIdError extends DriverError {
  constructor(reason: string) {
    super("NotFound", `malformed volume id: ${reason}`);
  }
}

export function isUuid(s: string): boolean {
  return UUID_RE.test(s);
}

export function composeVolumeId(p: Omit<VolumeIdParts, "version"> & { version?: number }): string {
  const version = p.version ?? VOLUME_ID_VERSION;
  const clusterLen = Buffer.byteLength(p.clusterID, "utf8");
  if (clusterLen === 0 || clusterLen > MAX_ID_BYTES - FIXED_BYTES) {
    throw new VolumeIdError(`cluster id must be 1..${MAX_ID_BYTES - FIXED_BYTES} bytes`);
  }
  // Only what decompose accepts back: printable ASCII.
  if (!PRINTABLE.test(p.clusterID)) throw new VolumeIdError("cluster id must be printable ASCII");
  if (!Number.isSafeInteger(p.poolID) || p.poolID < 0) throw new VolumeIdError("pool id must be a non-negative integer");
  if (!isUuid(p.uuid)) throw new VolumeIdError("uuid must be 36 lowercase hex characters with dashes");
  if (version !== VOLUME_ID_VERSION) throw new VolumeIdError(`unsupported encoding version ${version}`);
  const hex = (n: number, width: number) => n.toString(16).padStart(width, "0");
  return `${hex(version, 4)}-${hex(clusterLen, 4)}-${p.clusterID}-${hex(p.poolID, 16)}-${p.uuid}`;
}

export function decomposeVolumeId(id: string): VolumeIdParts {
  const total = Buffer.byteLength(id, "utf8");
  if (total < FIXED_BYTES + 1) throw new VolumeIdError(`too short (${total} bytes)`);
  if (total > MAX_ID_BYTES) throw new VolumeIdError(`too long (${total} bytes, max ${MAX_ID_BYTES})`);
  if (total !== id.length) throw new VolumeIdError("non-ASCII characters");
  const versionHex = id.slice(0, 4);
  const lenHex = id.slice(5, 9);
  if (!HEX4.test(versionHex) || id[4] !== "-") throw new VolumeIdError("bad version field");
  const version = Number.parseInt(versionHex, 16);
  if (version !== VOLUME_ID_VERSION) throw new VolumeIdError(`unsupported encoding version ${version}`);
  if (!HEX4.test(lenHex) || id[9] !== "-") throw new VolumeIdError("bad cluster id length field");
  const clusterLen = Number.parseInt(lenHex, 16);
  if (clusterLen === 0 || 10 + clusterLen + 1 + 16 + 1 + 36 !== total) {
    throw new VolumeIdError("cluster id length does not match the id's length");
  }
  const clusterID = id.slice(10, 10 + clusterLen);
  if (!PRINTABLE.test(clusterID)) throw new VolumeIdError("cluster id must be printable ASCII");
  let at = 10 + clusterLen;
  if (id[at] !== "-") throw new VolumeIdError("missing separator after cluster id");
  const poolHex = id.slice(at + 1, at + 17);
  if (!HEX16.test(poolHex)) throw new VolumeIdError("bad pool id field");
  const poolID = Number.parseInt(poolHex, 16);
  if (!Number.isSafeInteger(poolID)) throw new VolumeIdError("pool id out of range");
  at += 17;
  if (id[at] !== "-") throw new VolumeIdError("missing separator after pool id");
  const uuid = id.slice(at + 1);
  if (!isUuid(uuid)) throw new VolumeIdError("bad uuid");
  return { version, clusterID, poolID, uuid };
}
