import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { grpcCodeOf } from "@csi/contracts";
import { errorNameOf, rbdError } from "./errors.js";

describe("RBD errors as CSI codes", () => {
  it("maps what a Ceph cluster says to the code a CSI caller acts on", () => {
    const table: [number | null, string][] = [
      [2, "NotFound"],
      [17, "AlreadyExists"],
      [28, "ResourceExhausted"],
      [122, "ResourceExhausted"],
      [110, "Unavailable"],
      [111, "Unavailable"],
      [108, "Unavailable"],
      [107, "Unavailable"],
      [11, "Unavailable"],
      [16, "FailedPrecondition"],
      [39, "FailedPrecondition"],
      [30, "FailedPrecondition"],
      [34, "OutOfRange"],
      [125, "Aborted"],
      [1, "Internal"],
      [13, "Internal"],
      [22, "Internal"],
      [95, "Internal"],
      [9999, "Internal"],
      [null, "Internal"],
    ];
    for (const [errno, name] of table) assert.equal(errorNameOf(errno), name, `errno ${errno}`);
  });

  it("says which step failed, what the errno means and librbd's words, cut short", () => {
    const e = rbdError(110, `[errno 110] RADOS timed out ${"x".repeat(500)}`, 'pool "p": create image "v"');
    assert.equal(e.code, "Unavailable");
    assert.equal(grpcCodeOf(e.code), 14);
    assert.match(e.message, /^pool "p": create image "v": the cluster did not answer in time \(ETIMEDOUT\) \(\[errno 110\] RADOS timed out x+\)$/);
    assert.ok(e.message.length < 320, `${e.message.length}`);
    assert.match(rbdError(null, "TypeError: boom", "x").message, /^x: errno unknown \(TypeError: boom\)$/);
  });
});
