"""trajkit.synth: Toucan-style synthesis of tool-agentic data from real MCP servers.

Stages (each a ``StageSpec``, run by ``trajkit synth <command>`` or a pipeline file):

* ``harvest.py``  ``synth.harvest``  start the servers, list their tools -> ``servers``
* ``tasks.py``    ``synth.tasks``    tasks by direct or verbalized sampling -> ``tasks``
* ``rollouts.py`` ``synth.rollouts`` the agent loop over tasks, with ``--target`` -> ``trajectories``
* ``judge.py``    ``synth.judge``    LLM judge + computed tool accuracy -> ``task_quality``, ``trajectory_quality``
* ``filters.py``  ``synth.filter``   rule filters and thresholds -> ``rejected``
* ``extend.py``   ``synth.extend``   user-simulator follow-ups -> more ``trajectories``

Their parts: ``sampling.py`` (which servers and tools a request is about),
``vs.py`` (verbalized-sampling prompts and the candidate parser),
``candidates.py`` (candidate -> task, with its checks and verifier),
``ratings.py`` (judge scales and parser), ``tool_accuracy.py``, ``rules.py``,
``prompts.py`` (prompt files, ``examples/prompts/``), ``transcripts.py``
(tool listings and conversations as prompt text).
"""
