// Raw HTTP/1.1 over a TCP socket, for the transport tests: requests a client library would
// refuse to send (conflicting Content-Length, pipelining, trickled headers, headers without
// their body) and a small parser of the responses that come back.
import net from 'node:net';

// Parses every complete response at the start of `buf` (a Buffer); returns {responses, rest}.
// Each response: {status, headers (lowercase names), body (Buffer), raw}.
export function parseResponses(buf) {
  const responses = [];
  for (;;) {
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0) break;
    const head = buf.subarray(0, end).toString('latin1').split('\r\n');
    const status = Number(head[0].split(' ')[1]);
    const headers = {};
    for (const line of head.slice(1)) {
      const i = line.indexOf(':');
      headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    let pos = end + 4;
    let body;
    if (status === 100 || status === 204) {
      body = Buffer.alloc(0);
    } else if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      if (buf.length < pos + n) break;
      body = buf.subarray(pos, pos + n);
      pos += n;
    } else if (headers['transfer-encoding'] === 'chunked') {
      const parts = [];
      let p = pos;
      let complete = false;
      for (;;) {
        const le = buf.indexOf('\r\n', p);
        if (le < 0) break;
        const size = parseInt(buf.subarray(p, le).toString('latin1'), 16);
        if (buf.length < le + 2 + size + 2) break;
        parts.push(buf.subarray(le + 2, le + 2 + size));
        p = le + 2 + size + 2;
        if (size === 0) {
          complete = true;
          break;
        }
      }
      if (!complete) break;
      body = Buffer.concat(parts);
      pos = p;
    } else {
      break; // until the connection closes: not complete yet
    }
    const text = body.toString('utf8');
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {}
    responses.push({ status, headers, body, text, json });
    buf = buf.subarray(pos);
  }
  return { responses, rest: buf };
}

// A connection to 127.0.0.1:port: write(bytes), waitResponses(n, ms), closed (a promise).
export function connect(port) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: '127.0.0.1' });
    let buf = Buffer.alloc(0);
    let responses = [];
    let waiters = [];
    let isClosed = false;
    let error = null;
    const t0 = Date.now();
    const wake = () => {
      const r = parseResponses(buf);
      if (r.responses.length) {
        responses.push(...r.responses.map((x) => ({ ...x, ms: Date.now() - t0 })));
        buf = r.rest;
      }
      waiters = waiters.filter((w) => !w());
    };
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      wake();
    });
    const closed = new Promise((res) => sock.on('close', () => {
      isClosed = true;
      wake();
      res();
    }));
    sock.on('error', (e) => {
      error = e;
    });
    sock.once('connect', () =>
      resolve({
        sock,
        closed,
        isClosed: () => isClosed,
        error: () => error,
        responses: () => responses,
        write: (b) => new Promise((res) => sock.write(b, () => res())),
        end: () => sock.end(),
        destroy: () => sock.destroy(),
        // Resolves with the first n responses (or what came before the close / the timeout).
        waitResponses(n = 1, ms = 5000) {
          return new Promise((res) => {
            const timer = setTimeout(() => res(responses.slice()), ms);
            const check = () => {
              if (responses.length >= n || isClosed) {
                clearTimeout(timer);
                res(responses.slice());
                return true;
              }
              return false;
            };
            if (!check()) waiters.push(check);
          });
        },
      }),
    );
    sock.once('error', reject);
  });
}

// One raw request: sends `bytes`, resolves with the first response (or null) and whether the
// server closed the connection after it.
export async function rawRequest(port, bytes, ms = 5000) {
  const c = await connect(port);
  const t0 = Date.now();
  await c.write(bytes);
  const [r] = await c.waitResponses(1, ms);
  const ms1 = Date.now() - t0;
  await Promise.race([c.closed, new Promise((res) => setTimeout(res, 300))]);
  const closed = c.isClosed();
  c.destroy();
  return { response: r ?? null, closed, ms: ms1 };
}

export function sleepMs(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
