"""A bot of several processes: a gateway process, generation workers fed through Redis, Redis.

    gateway ──(Redis list: questions)──▶ worker 1, worker 2 ──▶ Discord (REST only)
       ▲                                          │
       └──── Stop clicks, /stop, follow-ups ──────┴── RedisStopRegistry, RedisBudgets

- `gateway` is the one process on Discord's gateway. It takes questions (a mention, `/ask`)
  and puts them on a Redis list; it handles `/stop`, the Stop button of any answer (through
  `cordstream.shell.buttons.stop_clicks`) and a user's new message, which interrupts that
  user's own answer wherever it streams (`request_follow_up` on the shared registry) and is
  queued as the next question.
- `worker` takes questions off the list and streams each answer live, with a Stop button, as a
  reply, through its own discord.py client (REST only: it has no gateway). Its streams read
  stops from the same `RedisStopRegistry` and share Discord's budgets with the other workers
  through `RedisBudgets`, so two workers in one channel get no 429.
- `python -m examples.cluster` (`make demo ARGS=--cluster`) runs it all on this machine: a
  `redis-server`, the local Discord, the gateway and two workers as OS processes of their own,
  a scripted model, and users who ask, interrupt and press Stop (see `__main__`).

A worker holds no interaction: `/ask` is answered by the gateway at once, with the question,
and the worker's answer is a reply to that. On a real Discord, run `python -m
examples.cluster.gateway` once and `python -m examples.cluster.worker` as often as you like,
each with `DISCORD_TOKEN` and `REDIS_URL` set (see the README, "Run it on many processes").
"""
