/**
 * Service processes that the tests of one file share, and the processes a single test owns.
 *
 * A shared process is started once (in `before()`) because starting one is slow. A test may take
 * it down (to kill it, to let a crashing replica answer, to see what happens while it is gone),
 * but only through `whileDown`: whatever happens in the test, the shared process runs again
 * when it returns, so no test depends on what an earlier one did to it. Every process a test
 * starts for itself (`own`) is gone when the test ends, even when it fails — a frozen
 * (SIGSTOPped) one included.
 *
 *   const journal = new SharedProcess((extra) => spawnService("journal", { ...env, ...extra }));
 *   before(() => journal.start());
 *   after(() => journal.stop());
 *   test("…", () => journal.whileDown(async (own) => {
 *     const crashing = await own({ JOURNAL_CRASH_AFTER: "VolumeReserved" });
 *     …
 *     await journal.start(); // optional: the healthy one back before the test ends
 *   }));
 */
import { endProcess, isRunning, type ServiceProcess } from "./processes.js";

/** Starts one process of the service, with extra environment. */
export type Launch = (extra?: Record<string, string>) => Promise<ServiceProcess>;

/** Runs `body` with a `own` launcher; every process started through it is ended afterwards. */
export async function withOwnProcesses<T>(launch: Launch, body: (own: Launch) => Promise<T>): Promise<T> {
  const owned: ServiceProcess[] = [];
  try {
    return await body(async (extra) => {
      const p = await launch(extra);
      owned.push(p);
      return p;
    });
  } finally {
    await Promise.all(owned.map((p) => endProcess(p)));
  }
}

export class SharedProcess {
  #current: ServiceProcess | undefined;

  constructor(private readonly launch: Launch) {}

  /** Starts it unless it is running (a process that died on its own is replaced). */
  async start(): Promise<ServiceProcess> {
    if (this.#current && isRunning(this.#current)) return this.#current;
    this.#current = await this.launch();
    return this.#current;
  }

  /** Stops it (SIGTERM; SIGKILL with `how: "kill"`). */
  async stop(how: "stop" | "kill" = "stop"): Promise<void> {
    const p = this.#current;
    this.#current = undefined;
    if (p) await (how === "kill" ? p.kill() : endProcess(p));
  }

  /**
   * Takes the shared process down (`how`), runs `body`, which may start processes of its own
   * through `own` (ended when it returns) and may `start()` the shared one again itself; then
   * makes sure the shared process runs, whether `body` passed or failed.
   */
  async whileDown<T>(body: (own: Launch) => Promise<T>, how: "stop" | "kill" = "stop"): Promise<T> {
    await this.stop(how);
    let result: T;
    try {
      result = await withOwnProcesses(this.launch, body);
    } catch (err) {
      // Back up for the next test; the error to report is still the test's own.
      await this.start().catch((e) => console.error("# could not restart the shared process after a failed test:", e));
      throw err;
    }
    await this.start();
    return result;
  }
}
