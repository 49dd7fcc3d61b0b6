"""HiMe's task suite (our design, made here): places on a line, one step per tick, a fixed tick deadline.

Memory tasks (the information needed at the end is shown once, at the start):
- ``cue``: a lamp shows a colour at tick 0; at the junction, 16 steps away, the two doors show colours in a
  random order; choosing the door of the lamp's colour succeeds (chance 1/2).
- ``count``: "press the button N times" (N in 1..4) at tick 0; halfway to the button it is moved to the far
  wall (a decision point: the old plan fails); pressing exactly N times and submitting succeeds (chance 1/4).
- ``putback``: the agent holds a cup taken from one of four shelves; it carries it to the table, where a human
  asks to put it back where it was (chance 1/4).

Markovian control: ``visible``: the flag's place is shown in every percept; reaching it and submitting
succeeds (a memoryless agent can do it).

Self-correction: ``putaway``: "put the cup away" where the cups' place is a preference the agent must know
(from its knowledge base); an optional human correction at tick 0 changes it.

Actions: ``move:<place>`` (one step toward it), ``press``, ``submit``, ``choose:<door>``, ``place``, ``wait``.
:class:`LineExecutor` turns a subgoal into these actions from the current percept alone (reactive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from icml_agents.hime import Fact, Observation, Subgoal

TASKS = ("cue", "count", "putback", "visible")
MEMORY_TASKS = ("cue", "count", "putback")
COLOURS = ("red", "blue")
SHELVES = tuple(f"shelf_{i}" for i in range(1, 5))
LENGTH = 16  # steps to the decision point
DEADLINE = 56  # ticks


@dataclass
class World:
    """One episode of ``task`` (see the module docstring), seeded."""

    task: str
    seed: int = 0
    length: int = LENGTH
    deadline: int = DEADLINE

    def __post_init__(self) -> None:
        if self.task not in (*TASKS, "putaway"):
            raise ValueError(f"task must be one of {(*TASKS, 'putaway')}, got {self.task!r}")
        rng = np.random.default_rng(self.seed)
        self.tick, self.pos, self.done, self.success = 0, 0, False, False
        self.presses = 0
        self.asked = ""  # a request that stays visible once made
        self.places = {"start": 0}
        self.key = ""  # what the episode's success depends on
        self.hint = ""  # the key in words: what an oracle executor is handed
        self.correction: Fact | None = None
        if self.task == "cue":
            self.key = str(rng.choice(COLOURS))
            self.doors = dict(zip(("left", "right"), rng.permutation(COLOURS).tolist(), strict=True))
            self.places["junction"] = self.length
            self.text = "walk to the junction and open the door that matches the lamp"
            self.hint = f"a {self.key} lamp is lit"
        elif self.task == "count":
            self.key = str(int(rng.integers(1, 5)))
            self.places["button"] = self.length
            self.text = "press the button as many times as you were told, then submit"
            self.hint = f"press the button {self.key} times"
        elif self.task in ("putback", "putaway"):
            self.key = str(rng.choice(SHELVES))
            for i, shelf in enumerate(SHELVES):
                self.places[shelf] = -1 - i
            self.places["table"] = self.length
            if self.task == "putback":
                self.text = "carry the cup to the table, then do as you are asked"
                self.hint = f"the cup stands on {self.key}"
            else:
                self.text = "put the cup away where cups belong"
        else:
            self.key = str(rng.choice(("flag_a", "flag_b", "flag_c")))
            for i, flag in enumerate(("flag_a", "flag_b", "flag_c")):
                self.places[flag] = self.length // 2 + 4 * i
            self.text = "go to the flag and submit"

    def _at(self) -> str:
        names = [n for n, p in self.places.items() if p == self.pos]
        return names[0] if names else f"cell {self.pos}"

    def observe(
        self, extra: str = "", decision: bool = False, human: str | None = None, facts=(), human_facts=()
    ):
        text = f"you are at {self._at()}"
        if self.task == "visible":
            text += f"; the flag is at {self.key}"
        if self.task == "count":
            text += f"; pressed {self.presses} times"
            if "far_button" in self.places:
                text += "; the button is now at the far wall (far_button)"
        if self.asked:
            text += f"; asked: {self.asked}"
        if extra:
            text += f"; {extra}"
        return Observation(
            self.tick,
            text,
            facts=tuple(facts),
            decision=decision,
            human=human,
            human_facts=tuple(human_facts),
        )

    def reset(self) -> Observation:
        if self.task == "cue":
            return self.observe(self.hint, facts=[Fact("lamp", {"colour": self.key}, text=self.hint)])
        if self.task == "count":
            return self.observe(self.hint, facts=[Fact("button", {"presses": self.key}, text=self.hint)])
        if self.task == "putback":
            return self.observe(
                f"you hold the cup; {self.hint}", facts=[Fact("cup", {"place": self.key}, text=self.hint)]
            )
        if self.task == "putaway" and self.correction is not None:
            return self.observe(
                "you hold a cup",
                human=f"no, cups go on {self.correction.attributes['place']}",
                human_facts=[self.correction],
            )
        return self.observe("you hold a cup" if self.task == "putaway" else "")

    def step(self, action: str) -> Observation:
        """Apply ``action``, advance one tick and return the new percept."""
        if self.done:
            raise ValueError("the episode is over")
        self.tick += 1
        extra, decision, facts, human = "", False, [], None
        if action.startswith("move:"):
            target = action[5:]
            if target not in self.places:
                extra = f"there is no {target} here"
            else:
                self.pos += int(np.sign(self.places[target] - self.pos))
        elif action == "press":
            if self._at() in ("button", "far_button"):
                self.presses += 1
        elif action == "submit":
            self.done = True
            if self.task == "count":
                self.success = self._at() == "far_button" and str(self.presses) == self.key
            elif self.task == "visible":
                self.success = self._at() == self.key
        elif action.startswith("choose:") and self.task == "cue" and self._at() == "junction":
            self.done = True
            self.success = self.doors.get(action[7:]) == self.key
        elif action == "place" and self.task in ("putback", "putaway") and self._at() in SHELVES:
            self.done = True
            self.success = self._at() == self.key
        if self.task == "count" and "button" in self.places and self.pos == self.length // 2:
            del self.places["button"]
            self.places["far_button"] = self.length + self.length // 2
            extra, decision = "the button was moved to the far wall (far_button)", True
        if self.task == "cue" and self._at() == "junction" and not self.done:
            extra = f"the left door is {self.doors['left']}, the right door is {self.doors['right']}"
            decision = True
            facts = [Fact("doors", dict(self.doors), text=extra)]
        if self.task == "putback" and self._at() == "table" and not self.done:
            human, decision = "please put the cup back where it was", True
            self.asked = human
        if self.tick >= self.deadline and not self.done:
            self.done, self.success = True, False
        return self.observe(extra, decision=decision, human=human, facts=facts)


class LineExecutor:
    """A reactive controller: subgoals ``goto(target)``, ``press(count)``, ``submit``, ``choose(door)``,
    ``place`` become actions from the current percept alone (no memory of its own)."""

    names = ("goto", "press", "submit", "choose", "place")

    def act(self, observation: Observation, subgoal: Subgoal | None) -> tuple[str, str]:
        text = observation.text
        if subgoal is None:
            return "wait", "running"
        args = subgoal.args
        if subgoal.name == "goto":
            target = str(args.get("target", ""))
            if f"there is no {target} here" in text:
                return "wait", "failed"
            if re.search(rf"you are at {re.escape(target)}(;|$)", text):
                return "wait", "done"
            return f"move:{target}", "running"
        if subgoal.name == "press":
            done = re.search(r"pressed (\d+) times", text)
            count = int(args.get("count", 1)) if str(args.get("count", 1)).isdigit() else 1
            if done and int(done.group(1)) >= count:
                return "wait", "done"
            return "press", "running"
        if subgoal.name == "choose":
            return f"choose:{args.get('door', 'left')}", "done"
        if subgoal.name in ("submit", "place"):
            return subgoal.name, "done"
        return "wait", "failed"
