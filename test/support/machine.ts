/** Test-side access to the machine helpers (devices, mounts, clean-up), which scripts/lib also uses. */
export * from "../../scripts/lib/machine.js";
