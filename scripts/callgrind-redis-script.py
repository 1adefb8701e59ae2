#!/usr/bin/env python3
"""Instructions redis-server executes per token-bucket decision, counted by valgrind's
callgrind (unlike CPU time, the count does not depend on what else the machine is doing):

  raw    benches/raw_token_bucket.lua by EVALSHA, one decision a call, 16 pipelined;
  store  the store's entry script (production source: the clock is the server's), calls of
         64 single-policy requests as RedisStore::check_batch sends them (uniform form),
         with the override flag (`bench!overrides`, set to "0": no override exists) and
         the keys marked distinct;
  store-noflag  the same calls without the flag (the script reads every key's override:
         what a Redis Cluster sends, and the only form of scripts before the flag).

Each starts its own redis-server under callgrind (collecting in readQueryFromClient and
handleClientsWithPendingWrites only: parsing, executing, replying), decides N calls once,
zeroes the counters, decides N more calls on other keys of the same 10,000 (keys without
state: under 1000 a second a key written once is idle, and expires, 1 ms later) and
divides the count by the decisions. With SAME=1 HOUR=1 the second pass decides the first
pass's keys again under a policy of 1 an hour with a burst of 1000 (a key charged once
lives an hour): each key's state is read, parsed and written back, and no two keys'
numbers are the same.
Usage: scripts/callgrind-redis-script.py [raw] [store] [store-noflag] [SCRIPT_DIR]
       (N=40 calls; env N)
"""
import glob, os, random, socket, subprocess, sys, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crates', 'sluicegate-redis')
PARTS = ['common.lua', 'fixed_window.lua', 'sliding_log.lua', 'sliding_window.lua', 'token_bucket.lua',
         'leaky_bucket.lua', 'gcra.lua', 'concurrency.lua', 'clock.lua', 'entry.lua']
B, KEYS, N = 64, 10000, int(os.environ.get('N', '40'))


def enc(args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)


class Conn:
    def __init__(self, port):
        self.s, self.buf = socket.create_connection(('127.0.0.1', port)), b''

    def _fill(self, n):
        while len(self.buf) < n:
            self.buf += self.s.recv(1 << 20)

    def read(self):
        while b'\r\n' not in self.buf:
            self.buf += self.s.recv(1 << 20)
        line, self.buf = self.buf.split(b'\r\n', 1)
        kind, rest = line[:1], line[1:]
        if kind == b'-':
            raise RuntimeError(rest.decode())
        if kind == b'$':
            n = int(rest)
            if n < 0:
                return None
            self._fill(n + 2)
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        if kind == b'*':
            return [self.read() for _ in range(int(rest))]
        return rest

    def cmd(self, *args):
        self.s.sendall(enc(args))
        return self.read()


# The policy, reduced by the gcd as the store sends it (limit, period, burst, and the raw
# limit and period): 1000 a second (burst 1000), or (HOUR=1) 1 an hour with a burst of 1000.
HOUR = os.environ.get('HOUR') == '1'
LIMIT, PERIOD, RLIMIT, RPERIOD = (1, 3600000000, 1, 3600000000) if HOUR else (1, 1000, 1000, 1000000)
SAME = os.environ.get('SAME') == '1'


def raw_call(sha, i):
    return enc(['EVALSHA', sha, 1, 'raw:{key-%d}:tb' % (i * 104729 % KEYS), LIMIT, PERIOD, 1000, 1]), 1


def store_call(sha, i, flag=True):
    keys = ['bench:{key-%d}:tb' % ((i * B + j) * 104729 % KEYS) for j in range(B)]
    op = 'check'
    if flag:
        # As RedisStore sends it: the flag key last; the 64 keys are distinct.
        keys.append('bench!overrides')
        op = 'check+!'
    # One token_bucket policy (1000/s: limit 1, period 1000 after the gcd), 64 requests of
    # cost 1 in the uniform form (policy 1, cost 1 once).
    return enc(['EVALSHA', sha, len(keys), *keys, '', op, 1, 4, 0, LIMIT, PERIOD, 1000, -1, 0, RLIMIT,
                RPERIOD, 0, 0, B, 1, 1]), B


def run(what, script_dir):
    port = 20000 + random.randint(0, 9999)
    out = '/tmp/callgrind-redis.%d' % port
    server = subprocess.Popen(
        ['valgrind', '--tool=callgrind', '--callgrind-out-file=' + out, '--collect-atstart=no',
         '--toggle-collect=readQueryFromClient', '--toggle-collect=handleClientsWithPendingWrites',
         'redis-server', '--port', str(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                conn = Conn(port)
                conn.cmd('PING')
                break
            except OSError:
                time.sleep(0.1)
        if what == 'raw':
            source, make, calls, pipe = open(os.path.join(ROOT, 'benches', 'raw_token_bucket.lua')).read(), raw_call, N * B, 16
        else:
            source = '\n'.join(open(os.path.join(script_dir, p)).read() for p in PARTS)
            flag = what == 'store'
            make, calls, pipe = (lambda sha, i: store_call(sha, i, flag)), N, 1
            conn.cmd('SET', 'bench!overrides', '0')
        sha = conn.cmd('SCRIPT', 'LOAD', source).decode()
        for i in range(calls):
            conn.s.sendall(make(sha, i)[0])
            conn.read()
        subprocess.run(['callgrind_control', '-z', str(server.pid)], stdout=subprocess.DEVNULL, check=True)
        decisions = 0
        for i in range(0, calls, pipe):
            batch = [make(sha, (0 if SAME else calls) + i + j) for j in range(pipe)]
            conn.s.sendall(b''.join(b for b, _ in batch))
            for _, d in batch:
                conn.read()
                decisions += d
        subprocess.run(['callgrind_control', '-d', str(server.pid)], stdout=subprocess.DEVNULL, check=True)
    finally:
        server.terminate()
        server.wait()
    total = 0
    for f in glob.glob(out + '*'):
        for line in open(f):
            if line.startswith(('summary:', 'totals:')):
                total = max(total, int(line.split()[1]))
        os.unlink(f)
    return total / decisions


def main():
    modes = ('raw', 'store', 'store-noflag')
    args = sys.argv[1:] or ['raw', 'store']
    dirs = [a for a in args if a not in modes]
    script_dir = dirs[0] if dirs else os.path.join(ROOT, 'src', 'script')
    for what in (a for a in args if a in modes):
        print('%-12s %8.0f instructions/decision' % (what, run(what, script_dir)), flush=True)


if __name__ == '__main__':
    main()
