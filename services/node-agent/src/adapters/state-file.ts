/**
 * A small JSON state file, written atomically: the value goes to `<file>.tmp-<pid>-<rand>`,
 * which is fsynced, renamed over `<file>`, and the directory fsynced, so after a crash the file
 * holds either the old value or the new one, never a mix. Saves through one `StateFile` are
 * applied in call order. What is loaded is checked with the zod schema given to the
 * constructor; a corrupt file is a clear Internal error, never a crash or a silent reset.
 */
import { readFile } from "node:fs/promises";
import { DriverError } from "@csi/contracts";
import { writeFileDurable } from "@csi/runtime";
import type { z } from "zod";

export class StateFile<T> {
  /** The last save in flight: saves wait for each other so an older value never lands last. */
  #tail: Promise<unknown> = Promise.resolve();

  constructor(
    readonly file: string,
    private readonly schema: z.ZodType<T>,
  ) {}

  /** The stored value, or undefined if the file does not exist yet. */
  async load(): Promise<T | undefined> {
    let text: string;
    try {
      text = await readFile(this.file, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw new DriverError("Internal", `cannot read state file ${this.file}: ${(err as Error).message}`, { cause: err });
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new DriverError("Internal", `state file ${this.file} is corrupt (not JSON: ${(err as Error).message})`, { cause: err });
    }
    const parsed = this.schema.safeParse(json);
    if (!parsed.success) throw new DriverError("Internal", `state file ${this.file} is corrupt (does not match its schema: ${summary(parsed.error)})`);
    return parsed.data;
  }

  /** Replace the stored value atomically. A value that does not match the schema is refused. */
  save(value: T): Promise<void> {
    const parsed = this.schema.safeParse(value);
    if (!parsed.success) return Promise.reject(new DriverError("Internal", `refusing to save an invalid state to ${this.file}: ${summary(parsed.error)}`));
    const text = `${JSON.stringify(value, null, 2)}\n`;
    const next = this.#tail.catch(() => {}).then(() => this.#write(text));
    this.#tail = next;
    return next;
  }

  async #write(text: string): Promise<void> {
    try {
      // Temp file fsynced, renamed over the file, the directory fsynced (a new one durable in its parent too).
      await writeFileDurable(this.file, text, 0o600);
    } catch (err) {
      throw new DriverError("Internal", `cannot write state file ${this.file}: ${(err as Error).message}`, { cause: err });
    }
  }
}

function summary(err: z.ZodError): string {
  return err.issues
    .slice(0, 5)
    .map((i) => `${i.path.map(String).join(".") || "(root)"}: ${i.message}`)
    .join("; ");
}
