/**
 * The log's backup (room door, `@csi/journal/backup`): the backup file format with its HMAC
 * (file.ts: header, messages, gaps, footer; pure), and export, import and a backup's fold over
 * NATS (io.ts). Its suites: file.test.ts beside it and test/restore.test.ts.
 */
export { BackupError, BackupKey, BackupWriter } from "./file.js";
export {
  backupFileLines,
  exportLogTo,
  exportLogToFile,
  foldBackup,
  type ImportPhase,
  importLog,
  newBackupFile,
  readBackupKey,
  restoreUnderWay,
} from "./io.js";
