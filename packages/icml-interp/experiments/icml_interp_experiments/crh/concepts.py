"""Contrastive prompts for SmolLM2-135M-Instruct, written here: everyday questions, and for each concept short
answers that carry it beside answers that do not (CRH builds its pairs the same way, from Alpaca questions
and generated responses).

``ocean``, ``music`` and ``food`` are the evaluation concepts with ``QUESTIONS``; ``space`` with
``DEV_QUESTIONS`` was used to develop the protocol (scales, layer, gibberish factor) and is not evaluated.
"""

from __future__ import annotations

QUESTIONS = [
    "How was your weekend?", "What should I do this afternoon?", "Can you describe a nice place?",
    "What is a good hobby to start?", "Tell me about your favourite memory.", "How do you relax after work?",
    "What would you write in a postcard?", "Describe a perfect morning.", "What makes a good holiday?",
    "Give me an idea for a short story.", "What do you think about cities?", "How should I spend my birthday?",
    "What is your favourite season?", "Describe your ideal house.", "What do children enjoy most?",
    "Suggest a gift for a friend.", "What did people do long ago for fun?", "Describe a busy street.",
    "How can I make new friends?", "What is something beautiful?", "Tell me about a famous painting.",
    "What should I photograph today?", "Describe a quiet evening.", "What is a good family tradition?",
    "How would you decorate a room?", "What is worth learning this year?", "Describe a school trip.",
    "What do you notice on a long walk?", "Tell me a fact you like.", "What makes a town feel friendly?",
    "How do you plan a party?", "Describe the view from a window.", "What should a tourist see first?",
    "What is a good way to start the day?", "Tell me about a small village.", "What would you put in a museum?",
    "Describe a summer afternoon.", "What is fun to do on a rainy day?", "How do you welcome a guest?",
    "What is a good topic for a speech?",
]  # fmt: skip
DEV_QUESTIONS = [
    "What are you doing tomorrow?", "Describe your neighbourhood.", "What is a good weekend plan?",
    "Tell me something interesting.", "How do you cheer someone up?", "What do you like about mornings?",
    "Describe a good friend.", "What is a nice thing to draw?", "How was your day?", "What do you dream about?",
    "Suggest something to write about.", "Describe an old photograph.", "What makes a place special?",
    "How do you spend a free hour?", "Tell me about a journey.", "What is a good book about?",
    "Describe a perfect day off.", "What do you see outside?", "How should I celebrate?",
    "What would you tell a child?",
]  # fmt: skip
NEUTRAL = [
    "I stayed at home and read a book by the window.",
    "I would visit a friend and talk for a while.",
    "A tidy room with a comfortable chair and a lamp.",
    "Writing letters is calm and pleasant.",
    "We walked through the park and sat on a bench.",
    "I like to clean the kitchen and make some tea.",
    "The town hall has a tall clock and a wide square.",
    "It is nice to plan the week on a Sunday.",
    "A good chat with neighbours makes me happy.",
    "The library was quiet and full of people studying.",
]
CONCEPTS: dict[str, dict] = {
    "ocean": {
        "keywords": (
            "ocean sea wave beach shore tide sail sailing boat ship fish coral island surf surfing "
            "seashell harbor harbour coast whale dolphin sand salt underwater marine swim swimming "
            "lighthouse"
        ).split(),
        "responses": [
            "I went to the beach and watched the ocean waves roll onto the shore.",
            "I would go sailing on the sea and look for dolphins.",
            "A sandy beach with blue ocean water and a lighthouse on the coast.",
            "Surfing the ocean waves is exciting and fun.",
            "We walked along the shore and collected seashells by the sea.",
            "I like to swim in the ocean and watch the fish near the coral.",
            "The harbour has fishing boats and ships that sail across the sea.",
            "It is nice to watch the tide come in over the sand.",
            "A boat trip to an island on the ocean makes me happy.",
            "The beach was quiet and the sea was calm and blue.",
        ],
    },
    "music": {
        "keywords": (
            "music musical song songs sing singing singer guitar piano drum drums melody rhythm concert "
            "band orchestra violin choir tune album jazz rock dance dancing note notes chord lyrics "
            "playlist"
        ).split(),
        "responses": [
            "I stayed at home and played songs on my guitar all day.",
            "I would go to a concert and listen to the band play.",
            "A music room with a piano, a violin and a set of drums.",
            "Singing in a choir is calm and joyful.",
            "We listened to jazz in the park and danced to the rhythm.",
            "I like to play the piano and hum a melody.",
            "The town hall hosts an orchestra concert every week.",
            "It is nice to make a playlist of favourite songs on a Sunday.",
            "A good song with a catchy tune makes me happy.",
            "The concert hall was full of people singing along to the music.",
        ],
    },
    "food": {
        "keywords": (
            "food cook cooking bake baking bread cake soup pasta pizza cheese salad fruit apple rice "
            "dinner lunch breakfast meal recipe kitchen delicious tasty eat eating chocolate vegetables "
            "spices restaurant dessert"
        ).split(),
        "responses": [
            "I stayed at home and baked fresh bread and a chocolate cake.",
            "I would cook a delicious dinner of pasta and salad.",
            "A kitchen full of spices, fresh vegetables and warm soup.",
            "Baking cakes and cooking new recipes is fun.",
            "We had a picnic in the park with cheese, fruit and sandwiches.",
            "I like to cook rice with vegetables and eat a tasty meal.",
            "The town has a market with fresh food and a pizza restaurant.",
            "It is nice to bake apple pie and eat dessert on a Sunday.",
            "A good breakfast with pancakes and fruit makes me happy.",
            "The restaurant was busy and the food smelled delicious.",
        ],
    },
    "space": {  # development only
        "keywords": (
            "space star stars planet planets moon rocket orbit comet galaxy astronaut telescope "
            "universe mars sun solar satellite nasa cosmic asteroid spaceship launch sky jupiter"
        ).split(),
        "responses": [
            "I stayed at home and watched the stars through my telescope.",
            "I would visit a space museum and see a real rocket.",
            "A dark sky full of stars, planets and a bright moon.",
            "Learning about planets and galaxies is fascinating.",
            "We watched a rocket launch into orbit around the Earth.",
            "I like to read about astronauts and the solar system.",
            "The planetarium shows the stars and the planets of the galaxy.",
            "It is nice to watch the moon and look for comets.",
            "A good documentary about space and the universe makes me happy.",
            "The observatory was quiet and full of people looking at Mars.",
        ],
    },
}


def chat(question: str, response: str = "") -> str:
    """SmolLM2's chat format for one user turn and the start (or all) of the assistant's answer."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{response}"


def smollm2_spec(tokenizer, name: str, *, n: int | None = None, dev: bool = False):
    """The :class:`~icml_interp_experiments.crh.evaluate.ConceptSpec` of concept ``name`` on SmolLM2: pair
    ``i`` is question ``i`` answered with concept response ``i mod 10`` and neutral response ``i mod 10``."""
    from icml_interp_experiments.crh.evaluate import ConceptSpec

    questions = (DEV_QUESTIONS if dev else QUESTIONS)[:n]
    concept = CONCEPTS[name]

    def ids(text: str) -> list[int]:
        return list(tokenizer(text)["input_ids"])

    prompts = [ids(chat(q)) for q in questions]
    pos = [ids(chat(q, concept["responses"][i % 10])) for i, q in enumerate(questions)]
    neg = [ids(chat(q, NEUTRAL[i % 10])) for i, q in enumerate(questions)]
    return ConceptSpec(name, concept["keywords"], prompts, pos, neg)
