/** Why real-device tests cannot run here, or undefined when they can. */
export declare function whyNoDevices(): string | undefined;
/** Online ext4 resize needs CAP_SYS_RESOURCE (bit 24), which some containers drop even for root. */
export declare const canResizeExt4Online: boolean;
export declare const hasXfs: boolean;
/** Loop devices whose backing file is under `dir` (deleted ones included). */
export declare function loopsUnder(dir: string): Promise<import("../../services/node-agent/src/adapters/loop.js").LoopDevice[]>;
export declare function mountsLeftUnder(dir: string): Promise<import("../../services/node-agent/src/domain/mountinfo.js").MountEntry[]>;
export declare function cleanupUnder(dir: string): Promise<void>;
