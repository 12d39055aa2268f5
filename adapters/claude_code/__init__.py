"""Claude Code's ``PreToolUse`` hooks decided in signoff.

- `adapters.claude_code.hook`: the hook input, the approval request it becomes and the
  answer Claude Code reads; shared by the ``signoff hook claude-code`` command and the
  HTTP route.
- `adapters.claude_code.route`: ``POST /claude-code/hook`` on ``signoff serve``.
- `adapters.claude_code.resume`: durable deferral: signoff resumes a deferred headless
  session (``claude -p --resume``) in a worker once its call is decided.

See ``docs/claude-code.md``.
"""
