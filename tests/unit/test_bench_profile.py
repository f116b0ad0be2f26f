"""bench/frontier_scale.py --profile: a perf sample's part, from its call stack (innermost frame first)."""

from bench.frontier_scale import GLUE, command_name, sample_part

LOOP = ["processInputBuffer", "readQueryFromClient", "aeProcessEvents", "aeMain", "main"]
EVAL = ["luaV_execute", "luaD_call", "lua_pcall", "luaCallFunction", "evalGenericCommand", "call", "processCommand",
        *LOOP]


def test_a_command_a_script_runs_is_named_by_its_own_function_not_by_the_script():
    frames = ["dictFind", "lookupKey", "zaddGenericCommand", "call", "scriptCall", "luaRedisGenericCommand", *EVAL]
    assert sample_part(frames) == "in scripts: ZADD"


def test_redis_calls_conversion_and_command_lookup_are_glue_not_a_command():
    assert sample_part(["luaArgsToRedisArgv", "luaRedisGenericCommand", *EVAL]) == GLUE
    assert sample_part(["dictFetchValue", "lookupCommand", "scriptCall", "luaRedisGenericCommand", *EVAL]) == GLUE


def test_the_interpreters_parts_are_told_apart_and_the_rest_is_the_interpreter():
    assert sample_part(["sweeplist", "singlestep", "luaC_step", *EVAL]) == "Lua: garbage collector"
    assert sample_part(["matchbracketclass", "match", "str_find_aux", *EVAL]) == "Lua: string.match and find"
    assert sample_part(["luaH_get", *EVAL]) == "Lua: the rest (interpreter, tables, calls)"


def test_a_workers_command_outside_scripts_is_its_own_and_the_benchmarks_reads_are_left_out():
    assert sample_part(["intsetFind", "sismemberCommand", "call", "processCommand", *LOOP]) == (
        "outside scripts: SISMEMBER")
    assert sample_part(["lookupCommand", "processCommand", *LOOP]) == "outside scripts: their dispatch"
    assert sample_part(["genRedisInfoString", "infoCommand", "call", "processCommand", *LOOP]) is None
    assert sample_part(["epoll_wait", "aeProcessEvents", "aeMain", "main"]) is None
    assert sample_part(["isInsideYieldingLongCommand", "processCommand", *LOOP]) == "outside scripts: their dispatch"


def test_a_stack_cut_short_above_the_script_still_counts_in_it():
    assert sample_part(["luaArgsToRedisArgv", "luaRedisGenericCommand", "luaD_precall"]) == GLUE


def test_command_names():
    assert command_name("pushGenericCommand") == "RPUSH/LPUSH"
    assert command_name("hmgetCommand") == "HMGET"
    assert command_name(None) == "?"
