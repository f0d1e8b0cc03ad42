#!/bin/sh
# The sample project's test: the program says hello.
out=$(./hello)
if [ "$out" = "hello, world" ]; then
    echo "PASS: hello says hello"
else
    echo "FAIL: got '$out'" >&2
    exit 1
fi
