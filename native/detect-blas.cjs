// Called by binding.gyp at configure time: prints "yes" when OpenBLAS's CBLAS header and library are
// installed (Debian's libopenblas-dev), "no" otherwise, so the addon links OpenBLAS only where it exists.
// MCPRL_NO_OPENBLAS=1 forces the portable-only build (used to test that build on a machine with OpenBLAS).
const fs = require('node:fs');
if (process.env.MCPRL_NO_OPENBLAS === '1') { process.stdout.write('no'); process.exit(0); }
const headers = ['/usr/include/x86_64-linux-gnu/cblas.h', '/usr/include/aarch64-linux-gnu/cblas.h',
  '/usr/include/openblas/cblas.h', '/usr/include/cblas.h'];
const libs = ['/usr/lib/x86_64-linux-gnu/libopenblas.so', '/usr/lib/aarch64-linux-gnu/libopenblas.so',
  '/usr/lib64/libopenblas.so', '/usr/lib/libopenblas.so'];
const ok = headers.some((h) => fs.existsSync(h)) && libs.some((l) => fs.existsSync(l));
process.stdout.write(ok ? 'yes' : 'no');
