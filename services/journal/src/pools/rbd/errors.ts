/**
 * librbd's and librados's answers (errno values, as the helper reports them) as the driver's
 * errors, in one table: the CSI code a caller gets for each thing a Ceph cluster can say.
 */
import { DriverError, type ErrorName } from "@csi/contracts";

/** errno → [error name, what it means here]. Linux numbers (librados returns them negated; the helper reports them positive). */
const TABLE: Record<number, [ErrorName, string]> = {
  1: ["Internal", "the Ceph user lacks a capability (EPERM)"],
  2: ["NotFound", "not found"],
  11: ["Unavailable", "the cluster asked to retry (EAGAIN)"],
  13: ["Internal", "access denied: a wrong key, or the Ceph user lacks a capability (EACCES)"],
  16: ["FailedPrecondition", "the image is in use (watchers or an exclusive lock holder)"],
  17: ["AlreadyExists", "already exists"],
  22: ["Internal", "the cluster refused the call (EINVAL)"],
  27: ["OutOfRange", "too large for the cluster"],
  28: ["ResourceExhausted", "the pool is full"],
  30: ["FailedPrecondition", "the image or pool is read-only"],
  34: ["OutOfRange", "out of range"],
  38: ["Internal", "not supported by the cluster (ENOSYS)"],
  39: ["FailedPrecondition", "the image still has snapshots or clones"],
  95: ["Internal", "not supported by the cluster or the image's features (EOPNOTSUPP)"],
  101: ["Unavailable", "the cluster is unreachable (ENETUNREACH)"],
  103: ["Unavailable", "the connection to the cluster broke (ECONNABORTED)"],
  104: ["Unavailable", "the connection to the cluster broke (ECONNRESET)"],
  107: ["Unavailable", "not connected to the cluster (ENOTCONN)"],
  108: ["Unavailable", "this client is blocklisted or shut down (ESHUTDOWN)"],
  110: ["Unavailable", "the cluster did not answer in time (ETIMEDOUT)"],
  111: ["Unavailable", "the cluster refused the connection (ECONNREFUSED)"],
  113: ["Unavailable", "the cluster is unreachable (EHOSTUNREACH)"],
  122: ["ResourceExhausted", "the pool's quota is reached (EDQUOT)"],
  125: ["Aborted", "the operation was cancelled; retry (ECANCELED)"],
};

/** The error name for an errno (Internal for one the table does not know). */
export function errorNameOf(errno: number | null): ErrorName {
  return (errno !== null && TABLE[errno]?.[0]) || "Internal";
}

/**
 * A DriverError for librbd's answer to `what` (e.g. `create image "csi-vol-…"`): the code from the
 * table, the message naming the step, what the errno means and librbd's own words (cut short).
 */
export function rbdError(errno: number | null, message: string, what: string): DriverError {
  const known = errno !== null ? TABLE[errno] : undefined;
  const meaning = known ? known[1] : `errno ${errno ?? "unknown"}`;
  return new DriverError(errorNameOf(errno), `${what}: ${meaning} (${message.slice(0, 200)})`);
}
