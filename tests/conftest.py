"""The tests, grouped by the layer they hold to the contract (docs/contract.md).

    domain/      the pure core: `step`, segments, capture, live layout, usage, embeds
                 (no event loop, no Discord; `support.driver` plays the shell)
    shell/       the real shell against the local Discord emulator (discord.py, looptime):
                 delivery, rate limits, stops, interactions, cleanup, the test kit itself
    providers/   the adapters with the real SDKs against a local model server
    bot/         what a user runs: the gateway, examples/bot.py, the CLI, demo and chat
    soak/        the soak (`python -m tests.soak`) and its short run inside `make test`
    bench/       bench scripts run as a user runs them (`python -m bench.x`)
    support/     shared harnesses, imported by the tests above (not fixtures): driver,
                 live_driver, stage, oracle, answers, adapters, bad_inputs, fuzz
    install/     the wheel installed apart from the repo (`make install-check`)
    mutation/    `make mutate`

A test imports cordstream as a user does (`cordstream.domain`, `cordstream.shell`, the test
kit `cordstream.shell.testing`), and the harnesses from `tests.support`; a test that needs a
file of the repository finds it from its own path. Nothing here is a fixture: no fixture is
repeated across the tests' files, each test file's own are beside its tests.
"""
