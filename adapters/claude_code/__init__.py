"""Claude Code's ``PreToolUse`` hooks decided in signoff.

- `adapters.claude_code.hook`: the hook input, the approval request it becomes and the
  answer Claude Code reads; shared by the ``signoff hook claude-code`` command and the
  HTTP route.
- `adapters.claude_code.route`: ``POST /claude-code/hook`` on ``signoff serve``.

See ``docs/claude-code.md``.
"""
