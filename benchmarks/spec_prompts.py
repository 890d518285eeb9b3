"""The fixed prompt set of `bench_speculation.py`: echo-heavy prompts (edit code and return it
whole, summarise a pasted text quoting it, answer from a pasted document) and open chat.

Each prompt is (kind, name, user message); kind is "echo" or "open".
"""

from __future__ import annotations

CODE_A = '''def parse_config(path):
    settings = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


def merge_configs(base, override):
    result = dict(base)
    for key, value in override.items():
        result[key] = value
    return result
'''

CODE_B = '''class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()

    def peek(self):
        return self.items[-1]

    def is_empty(self):
        return len(self.items) == 0

    def size(self):
        return len(self.items)
'''

CODE_C = '''function totalPrice(cart) {
  let total = 0;
  for (const item of cart.items) {
    total += item.price * item.quantity;
  }
  if (cart.coupon) {
    total = total - cart.coupon.amount;
  }
  return total;
}
'''

TEXT_A = (
    "The river town of Eldham was built on trade. Barges carried wool and grain down to the "
    "coast, and every spring the market square filled with merchants from the hill villages. "
    "In 1820 a new canal opened twenty miles to the east, and within a decade most of the "
    "barge traffic had moved there. The town council tried to win it back by lowering the "
    "dock fees, but the canal was faster and safer. By 1850 the population had fallen by half. "
    "The town survived because a doctor named Mary Hollis opened a spa around the old mineral "
    "springs, and visitors began to arrive by the new railway."
)

TEXT_B = (
    "Honey bees communicate the location of food with a waggle dance. A forager returning to "
    "the hive walks in a straight line while shaking her body, then circles back and repeats. "
    "The angle of the straight run relative to vertical shows the direction of the food "
    "relative to the sun. The length of the run shows the distance: a longer waggle means the "
    "flowers are farther away. Other bees follow the dancer, learn the direction and distance, "
    "and fly out to find the flowers themselves."
)

DOC_A = (
    "Returns policy. Items bought in our stores or online can be returned within 30 days of "
    "delivery for a full refund. Items must be unused and in their original packaging. Sale "
    "items can be returned within 14 days and are refunded as store credit only. Electronics "
    "must be returned with all accessories and the original receipt. Refunds are issued to the "
    "original payment method within 5 to 7 business days after we receive the item. Shipping "
    "costs are not refunded unless the item arrived damaged or was not what you ordered."
)

DOC_B = (
    "Meeting notes, 12 March. Attendees: Priya, Tom, Lena and Marco. Priya reported that the "
    "new billing system will launch on 2 April. Tom said the data migration is finished but "
    "the reports module still has two open bugs. Lena will write the customer announcement by "
    "20 March. Marco asked for a rollback plan; Tom will prepare it by 25 March. The team "
    "agreed to hold a final go or no-go meeting on 31 March at 10 am."
)

PROMPTS: list[tuple[str, str, str]] = [
    ("echo", "code-rename", "Rename the variable `settings` to `config` in this code and return "
     "the whole code:\n\n```python\n" + CODE_A + "```"),
    ("echo", "code-docstrings", "Add a one-line docstring to every method of this class and "
     "return the whole class:\n\n```python\n" + CODE_B + "```"),
    ("echo", "code-js-edit", "Change `let` to `var` in this function and return the whole "
     "function:\n\n```javascript\n" + CODE_C + "```"),
    ("echo", "code-comments", "Add a comment above each function explaining what it does, and "
     "return the full code:\n\n```python\n" + CODE_A + "```"),
    ("echo", "quote-town", "Summarise this text, quoting its key sentences word for word:\n\n"
     + TEXT_A),
    ("echo", "quote-bees", "Summarise this text in a few sentences, quoting it directly:\n\n"
     + TEXT_B),
    ("echo", "repeat-bees", "Repeat the following text exactly, then add one sentence about "
     "why it matters:\n\n" + TEXT_B),
    ("echo", "doc-returns", DOC_A + "\n\nUsing only the policy above, answer: how long do I have "
     "to return a sale item, and how is it refunded? Quote the policy."),
    ("echo", "doc-refund", DOC_A + "\n\nQuote the sentences of this policy about refunds and "
     "shipping costs."),
    ("echo", "doc-meeting", DOC_B + "\n\nList every task from these notes with its owner and "
     "date, using the wording of the notes."),
    ("open", "story-dragon", "Tell me a short story about a dragon who is afraid of the dark."),
    ("open", "exercise", "What are the main benefits of regular exercise?"),
    ("open", "rainbow", "Explain how a rainbow forms."),
    ("open", "poem-autumn", "Write a poem about autumn leaves."),
    ("open", "language", "Give me some tips for learning a new language."),
    ("open", "breakfast", "What is a healthy breakfast I can make in five minutes?"),
    ("open", "planets", "Why do planets orbit the sun?"),
    ("open", "email", "Write a friendly email inviting my team to a picnic on Saturday."),
    ("open", "sleep", "How can I sleep better at night?"),
    ("open", "history", "Who was Julius Caesar and why is he famous?"),
]
