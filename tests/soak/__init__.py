"""The soak: thousands of randomized streams through the real shell, under faults.

`python -m tests.soak` (`make soak`; docs/soak.md has the options, every rule the plans follow
and every figure). It is a test: it exits 1 when a must-be-zero figure is not zero, and
`tests/soak/test_soak.py` runs a short one inside `make test`.

What it is. Each stream is a real `StreamOrchestrator.stream_to_discord` call, through a real
logged-in `discord.Client` and the local `DiscordEmulator`, in batches of concurrent streams,
one emulator channel each. Everything runs on looptime's virtual clock, so hangs, timeouts,
429 waits, discord.py's backoff and the provider's cleanup budget cost no real time. Four
phases: faults (rate limits off), the same under Discord's real rate limits, clean 3-line
answers all at once at the global limit, and streams into slash commands' interactions
through a bot on the emulator's gateway.

The one idea. Every stream's *plan* (its provider's script and misbehaviour, the Discord
faults queued for its channel, the user requests and the moments they come, the caller and
the config) is drawn from one `random.Random(seed)`, in stream order, before it runs. Running
a plan records an *outcome* (what Discord accepted, the result, the requests, the caller's
state, the registry's entries); judging it is a pure function of that record, the oracle the
shell's property tests share (`tests.support.oracle`) plus the soak's own checks. So the
same seed gives the same plans, and a violation is a value in the report, never an exception.
Real I/O interleaves with virtual time: two runs with one seed agree on the plans, not
necessarily on every status.

What it never does. It mocks nothing of discord.py or the shell, and it does not retry: a
stuck stream is cancelled and counted, a leaked task or listener is counted, and a client a
probe send cannot get through after a batch is counted as wedged.

One job per module, in the order they depend on each other: `faults` (the misbehaving
provider, the Discord faults), `plans` (what each stream will do), `outcome` (what one stream
produced), `checks` (the invariants of one outcome), `report` (the figures, tallied and
printed), `run` (streams and batches on one emulator), `interactions` (the interactions
phase), `phases` (the four phases and the seeded run), `__main__` (the command line).
"""
