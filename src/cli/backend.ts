/**
 * `mcprl backend --dir DIR [--host 127.0.0.1] [--port 8100] [--token T]`: the training server for the library's
 * RemoteBackend (src/backend/server.ts). One process owns the engine; it serves every registered model's newest
 * adapter over the OpenAI-compatible API and trains on the groups it receives. The folder is the server's alone
 * (startBackendServer holds its lock), so a second backend on the same folder refuses at start, naming the first.
 */
import type { Command } from 'commander';
import { startBackendServer } from '../backend/server.js';
import { chooseDevice, describeDevice, DeviceOptionsSchema, type Device } from '../engine/device.js';
import { removeUnfinishedOutputs } from '../export/out-dir.js';
import { downloadProgress } from './model-option.js';
import { numberParser } from './parse-number.js';
import { addSchemaOptions } from './schema-options.js';
import { addGuardOptions, closeOnSignal, reportFailure } from './server-process.js';

interface BackendCliOptions {
  dir: string;
  host: string;
  port: number;
  token?: string;
  allowedHost?: string[];
  allowedOrigin?: string[];
  threads?: number;
  device?: Device;
  quiet?: boolean;
}

export function registerBackend(program: Command): Command {
  const cmd = program
    .command('backend')
    .description('the training server: serve and train trainable models for RemoteBackend clients')
    .requiredOption('--dir <dir>', 'folder everything is written under (models, checkpoints, metrics)')
    .option('--host <host>', 'address to listen on (beyond loopback a token is required)', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0: any free port)', numberParser({ integer: true, min: 0, max: 65535 }), 8100)
    .option('--token <token>', 'bearer token every request must carry (default: $MCPRL_BACKEND_TOKEN; none on loopback)')
    .option('--threads <n>', 'engine threads (default: the engine default)', numberParser({ integer: true, above: 0 }))
    .option('--quiet', 'do not log one line per request to stderr');
  addSchemaOptions(cmd, DeviceOptionsSchema);
  addGuardOptions(cmd);
  cmd.addHelpText(
    'after',
    `
Examples:
  mcprl backend --dir ~/mcprl-backend --host 0.0.0.0 --port 8100 --token "$(openssl rand -hex 16)"
  # then, in the application:  await model.register(new RemoteBackend('http://gpu-box:8100', token))`,
  );
  cmd.action(async (opts: BackendCliOptions) => {
    try {
      // An explicit --token is checked as given (a blank one is refused); an empty variable is no token.
      const token = opts.token ?? (process.env.MCPRL_BACKEND_TOKEN || undefined);
      // A device that cannot run is refused before the server starts (each model's fit is checked when it registers).
      const device = chooseDevice(opts.device);
      const running = await startBackendServer({
        dir: opts.dir,
        host: opts.host,
        port: opts.port,
        ...(token !== undefined ? { token } : {}),
        ...(opts.allowedHost ? { allowedHosts: opts.allowedHost } : {}),
        ...(opts.allowedOrigin ? { allowedOrigins: opts.allowedOrigin } : {}),
        ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
        ...(opts.device !== undefined ? { device: opts.device } : {}),
        ...(opts.quiet ? {} : { log: (line: string) => process.stderr.write(`mcprl backend: ${line}\n`) }),
        // A model registered by hub id downloads here, on the backend's machine; its progress shows even with --quiet.
        onDownload: downloadProgress('mcprl backend', process.stderr),
      });
      process.stdout.write(`mcprl backend: listening on ${running.url} (folder ${running.backend.dir}, ${describeDevice(device)})\n`);
      // A parent that started this process with an IPC channel (scripts/measure-games.ts) gets the URL as data.
      process.send?.({ type: 'listening', url: running.url });
      closeOnSignal(async () => {
        await running.close();
        // An export under way when the signal came is not waited for: its temporary folder goes with it.
        removeUnfinishedOutputs();
      });
    } catch (err) {
      reportFailure('backend', err);
    }
  });
  return cmd;
}
