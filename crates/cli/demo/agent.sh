#!/bin/sh
# The korvus demo agent: a stand-in for a real AI agent that speaks the
# CommandRunner protocol (docs/command-runner.md). POSIX sh, no other tools
# than coreutils, sed and awk.
#
# It reads the prompt (or the follow-up message) on stdin and its run
# manifest ($KORVUS_MANIFEST), looks at the read-only trees seeded from the
# pinned repository (skills/, docs/), writes report.md and a few files, and
# prints JSON events on stdout — one per line. KORVUS_DEMO_PAUSE (seconds,
# default 0.3) paces it so the live view is readable.
set -eu

pause() { sleep "${KORVUS_DEMO_PAUSE:-0.3}"; }

# A string as the inside of a JSON string literal.
json() {
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' |
        awk 'BEGIN { ORS = "" } NR > 1 { print "\\n" } { print }'
}
say() { printf '{"type":"message","role":"assistant","text":"%s"}\n' "$(json "$1")"; pause; }
call() { printf '{"type":"tool_call","call_id":"%s","tool":"%s","input":%s}\n' "$1" "$2" "$3"; pause; }
result() { printf '{"type":"tool_result","call_id":"%s","ok":true,"output":"%s"}\n' "$1" "$(json "$2")"; pause; }

# On cancellation (SIGTERM to the whole group) leave a partial report, so
# the cancelled session still lands one.
trap 'printf "\n_Cancelled before the investigation finished._\n" >> report.md; exit 143' TERM

input=$(cat)
turn=$KORVUS_REVISION
echo "{\"type\":\"turn_start\",\"turn\":$turn}"

# Skill names from the manifest (pretty-printed JSON: one "name" per line).
skills=$(sed -n 's/^ *"name": "\(.*\)",*$/\1/p' "$KORVUS_MANIFEST" | tr '\n' ' ')

if [ "$KORVUS_RESUME" = 0 ]; then
    say "Investigating: $input"
    call c1 read_manifest "{\"path\":\"$(json "$KORVUS_MANIFEST")\"}"
    result c1 "revision $KORVUS_REVISION; skills: ${skills:-none}"
    call c2 list_seeded_trees '{"trees":["skills","docs"]}'
    result c2 "$(find skills docs -type f 2>/dev/null | sort | tr '\n' ' ')"
    call c3 read_file '{"path":"docs/runbook.md"}'
    first_step=$(grep -m1 '^1\.' docs/runbook.md 2>/dev/null || echo "no runbook")
    result c3 "$first_step"
    echo "The runbook's first step is: $first_step"
    pause

    mkdir -p findings notes
    cat > findings/disk-usage.csv <<'EOF'
path,bytes,share
/var/lib/postgresql/wal,41231686041,0.62
/var/log/postgresql,15032385536,0.23
/var/lib/postgresql/base,9663676416,0.15
EOF
    cat > notes/timeline.md <<'EOF'
# Timeline

- 02:10 replication slot `analytics` stops advancing
- 02:10–06:40 WAL accumulates under /var/lib/postgresql/wal
- 06:41 disk usage alert at 95 %
EOF
    cat > report.md <<EOF
# Disk full on db-1

**Question:** $input

## Findings

- WAL files take 62 % of the disk: the replication slot \`analytics\`
  stopped advancing at 02:10 and PostgreSQL keeps every segment since.
- Logs take another 23 %; rotation works but keeps 30 days.

## Evidence

- \`findings/disk-usage.csv\` — usage by directory
- \`notes/timeline.md\` — what happened when
- Skills consulted: ${skills:-none}

## Next step

Follow the runbook (\`docs/runbook.md\`): $first_step
EOF
    say "Wrote report.md, findings/disk-usage.csv and notes/timeline.md."
    echo '{"type":"usage","input_tokens":1830,"output_tokens":412}'
else
    say "Follow-up: $input"
    call c4 read_file '{"path":"report.md"}'
    result c4 "$(wc -l < report.md | tr -d ' ') lines from revision $((KORVUS_REVISION - 1))"
    mkdir -p followups
    cat > "followups/answer-$KORVUS_REVISION.md" <<EOF
# Answer to: $input

Dropping the stale replication slot frees the WAL at the next checkpoint:

    SELECT pg_drop_replication_slot('analytics');

Logs older than 7 days can go: \`find /var/log/postgresql -mtime +7 -delete\`.
EOF
    # report.md came back restored (maybe read-only): write a new one.
    cp report.md report.md.new
    cat >> report.md.new <<EOF

## Follow-up (revision $KORVUS_REVISION)

**Question:** $input

See \`followups/answer-$KORVUS_REVISION.md\`: drop the \`analytics\` slot, then
trim logs older than 7 days. findings/ and notes/ are unchanged.
EOF
    rm -f report.md
    mv report.md.new report.md
    say "Updated report.md and wrote followups/answer-$KORVUS_REVISION.md; findings/ and notes/ are unchanged."
    echo '{"type":"usage","input_tokens":2210,"output_tokens":298}'
fi

echo "{\"type\":\"turn_end\",\"turn\":$turn}"
