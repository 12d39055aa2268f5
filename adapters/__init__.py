"""Platform edges (Slack, Discord, webhooks, the web console); they depend on `runtime` only.

Each edge is a thin translator: a platform payload becomes a start-run command or a
`runtime.ResumeCommand`, and a runtime notification becomes a platform message.
"""
