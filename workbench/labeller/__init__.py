"""The labelling engine: one path from a prompt and a report to a stored answer.

labelling builds requests and runs them; llm talks to models through litellm; rules is the
offline baseline; workers and batch spread calls over processes and provider batch jobs;
endpoints is the destination guard every call passes.
"""
