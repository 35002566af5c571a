"""A Spanish conversation set written for the project, generated from templates (no dataset copied).

Greetings and thanks, short factual answers, household questions, and questions that need current
information (answered with the web-search tool when offered, about half the time, else with "I
cannot know"); each with and without a system prompt. Every fifth value of each slot list and
every fifth household question appear only in validation, so it measures replies to unseen content;
in training, most searched names are invented, so only copying them is right. Given the
assistant's memory tools, a share of the conversations remember, forget or use a family fact;
given the shopping list, a share add to it, remove from it or read it. Half of the user turns
that end in a period come without it, as people type and voice assistants transcribe.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from enlace_config.contracts import (
    FORGET_TOOL_NAME,
    MEMORY_HEAD,
    MEMORY_TOOLS,
    NO_MEMORIES,
    REMEMBER_TOOL_NAME,
    SEARCH_TOOL_NAME,
    SHOPPING_LIST_PROMPT,
    SHOPPING_LIST_TOOL_NAME,
)

from enlace_data.chat.tools import check_tools, tool_name

__all__ = ["SEARCH_TOOL_NAME", "builtin_conversations"]

# A short spec of that tool: a smoke model's context is small.
SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": SEARCH_TOOL_NAME,
        "parameters": {
            "type": "object",
            "properties": {"consulta": {"type": "string"}},
            "required": ["consulta"],
        },
    },
}
SYSTEMS = (
    None,
    None,
    "Eres Enlace, un asistente familiar que habla español.",
    "Eres Enlace. Responde de forma breve y amable.",
)
HELD_OUT_EVERY = 5

# Large lists, so that a model learns to copy a name from the question rather than to remember a
# few: every HELD_OUT_EVERY-th value (1-based) appears only in validation (Zaragoza, which the
# end-to-end chat test asks about, is one of them).
CITIES = (
    "Sevilla", "Madrid", "Valencia", "Bilbao", "Zaragoza", "Málaga", "Granada", "Oviedo",
    "Murcia", "Salamanca", "Cádiz", "Toledo", "León", "Vigo", "Córdoba", "Burgos", "Almería",
    "Girona", "Logroño", "Huelva", "Santander", "Pamplona", "Badajoz", "Cáceres", "Segovia",
    "Ávila", "Soria", "Teruel", "Cuenca", "Jaén", "Lleida", "Tarragona", "Gijón", "Palencia",
    "Zamora", "Valladolid", "Ourense", "Lugo", "Pontevedra", "Jerez", "Alicante", "Castellón",
    "Albacete", "Ciudad Real", "Guadalajara", "Huesca", "Mérida", "Santiago", "Ferrol", "Elche",
    "Cartagena", "Lorca", "Marbella", "Ronda", "Úbeda", "Baeza", "Plasencia", "Ponferrada",
    "Astorga", "Reus", "Sabadell", "Terrassa", "Badalona", "Getafe", "Alcalá de Henares",
    "Móstoles", "Leganés", "Fuenlabrada", "Alcorcón", "Torrejón", "Aranjuez", "Talavera",
    "Linares", "Motril", "Antequera", "Écija", "Osuna", "Utrera", "Calahorra", "Tudela",
    "Vitoria", "Irún", "Eibar", "Getxo", "Benidorm", "Denia", "Gandía", "Sagunto", "Alcoy",
    "Orihuela", "Manresa", "Vic", "Figueres", "Olot", "Blanes", "Mataró", "Calatayud", "Jaca",
    "Barbastro", "Alcañiz",
)  # fmt: skip
TEAMS = (
    ("el", "Betis"), ("el", "Athletic"), ("el", "Celta"), ("el", "Osasuna"), ("el", "Alavés"),
    ("el", "Villarreal"), ("el", "Espanyol"), ("el", "Rayo Vallecano"), ("la", "Real Sociedad"),
    ("la", "UD Las Palmas"), ("el", "Atlético"), ("el", "Barça"), ("el", "Real Madrid"),
    ("el", "Racing"), ("el", "Sporting"), ("el", "Tenerife"), ("el", "Levante"),
    ("el", "Mirandés"), ("el", "Deportivo"), ("el", "Numancia"), ("la", "Ponferradina"),
    ("el", "Unionistas"), ("la", "Real Unión"), ("el", "Amorebieta"), ("el", "Andorra"),
    ("el", "Eldense"), ("el", "Nàstic"), ("el", "Recreativo"), ("el", "Hércules"),
    ("el", "Mallorca"),
)  # fmt: skip
PRODUCTS = (
    ("la", "gasolina"), ("el", "aceite de oliva"), ("la", "luz"), ("el", "pan"),
    ("los", "huevos"), ("el", "café"), ("el", "butano"), ("la", "leche"), ("las", "naranjas"),
    ("el", "abono transporte"), ("el", "gasóleo"), ("los", "tomates"), ("las", "patatas"),
    ("el", "pollo"), ("la", "merluza"), ("el", "azúcar"), ("el", "arroz"), ("los", "plátanos"),
    ("las", "manzanas"), ("la", "cerveza"), ("el", "queso"), ("el", "jamón"),
    ("el", "alquiler"), ("el", "gas natural"), ("las", "lentejas"), ("el", "atún"),
    ("los", "limones"), ("la", "harina"), ("el", "yogur"), ("las", "sardinas"),
)  # fmt: skip
PLACES = (
    ("la", "farmacia"), ("el", "ayuntamiento"), ("la", "biblioteca"), ("el", "mercado"),
    ("la", "oficina de correos"), ("el", "centro de salud"), ("la", "piscina municipal"),
    ("el", "museo"), ("el", "polideportivo"), ("la", "estación de tren"),
    ("la", "oficina de turismo"), ("el", "registro civil"), ("el", "mercadillo"),
    ("la", "catedral"), ("el", "cementerio"),
)  # fmt: skip
NEWS = (
    "las elecciones", "la huelga de transporte", "el precio de la vivienda", "la sequía",
    "los incendios", "la liga de fútbol", "el festival de cine", "las pensiones",
    "el salario mínimo", "la vuelta ciclista", "la ola de calor", "el cambio de hora",
    "las rebajas", "la lotería de Navidad", "la gripe", "las obras del metro",
    "el tren de alta velocidad", "la huelga de médicos", "las becas", "las oposiciones",
    "el eclipse", "el carnaval", "la Semana Santa", "la feria del libro", "el Mundial",
    "los Juegos Olímpicos", "la borrasca", "el apagón", "la vacuna", "el puente de mayo",
)  # fmt: skip
COUNTRIES = (
    ("Francia", "París"), ("Italia", "Roma"), ("Portugal", "Lisboa"), ("Alemania", "Berlín"),
    ("México", "Ciudad de México"), ("Argentina", "Buenos Aires"), ("Perú", "Lima"),
    ("Chile", "Santiago"), ("Colombia", "Bogotá"), ("Japón", "Tokio"), ("Egipto", "El Cairo"),
    ("Grecia", "Atenas"), ("Noruega", "Oslo"), ("Cuba", "La Habana"), ("Marruecos", "Rabat"),
    ("Polonia", "Varsovia"), ("Irlanda", "Dublín"), ("Uruguay", "Montevideo"),
    ("Canadá", "Ottawa"), ("Suecia", "Estocolmo"),
)  # fmt: skip
FACTS = (
    ("¿Cuántos días tiene un año bisiesto?", "Un año bisiesto tiene 366 días."),
    ("¿A qué temperatura hierve el agua?", "Al nivel del mar, el agua hierve a 100 grados."),
    ("¿Cuántas patas tiene una araña?", "Una araña tiene ocho patas."),
    ("¿Qué planeta está más cerca del Sol?", "Mercurio es el planeta más cerca del Sol."),
    ("¿Cuántas letras tiene el abecedario español?", "El abecedario español tiene 27 letras."),
    ("¿Quién escribió el Quijote?", "El Quijote lo escribió Miguel de Cervantes."),
    ("¿Cuántos minutos tiene una hora?", "Una hora tiene 60 minutos."),
    ("¿De qué color es la clorofila?", "La clorofila es verde."),
    ("¿Cuál es el océano más grande?", "El océano más grande es el Pacífico."),
    ("¿Cuántos lados tiene un hexágono?", "Un hexágono tiene seis lados."),
)  # fmt: skip
HOUSEHOLD = (
    ("¿Cómo quito una mancha de vino de un mantel?",
     "Echa sal enseguida, aclara con agua fría y lava con un poco de jabón."),
    ("¿Cómo limpio el horno sin productos fuertes?",
     "Haz una pasta de bicarbonato y agua, déjala una noche y retírala con un paño húmedo."),
    ("¿Cuánto tiempo cuezo un huevo duro?", "Unos diez minutos desde que el agua hierve."),
    ("¿Cómo evito que el arroz se pegue?",
     "Lava el arroz antes, usa la cantidad justa de agua y no lo remuevas mientras se hace."),
    ("¿Cómo desatasco un fregadero?",
     "Prueba con agua muy caliente y un desatascador; si sigue, limpia el sifón."),
    ("¿Cada cuánto debo regar un cactus?",
     "Poco: cada dos o tres semanas en verano y casi nada en invierno."),
    ("¿Cómo quito la cal del grifo?",
     "Envuelve el grifo con un paño empapado en vinagre una hora y frota después."),
    ("¿Cómo conservo el pan para que no se ponga duro?",
     "Guárdalo en una bolsa de tela; para varios días, mejor congelado en rebanadas."),
    ("¿Cómo cambio una bombilla con seguridad?",
     "Apaga el interruptor, espera a que se enfríe y enrosca la nueva sin forzarla."),
    ("¿Cómo quito el olor de la nevera?",
     "Limpia con agua y bicarbonato y deja dentro un vaso con bicarbonato."),
    ("¿Cómo hago una tortilla de patatas?",
     "Fríe patata y cebolla a fuego lento, mézclalas con huevo batido y cuaja por los dos lados."),
    ("¿Cómo lavo una almohada?",
     "Casi todas van a la lavadora con agua templada; sécala bien para que no coja humedad."),
    ("¿Cómo ahorro luz en casa?",
     "Usa bombillas LED, pon lavadoras llenas y apaga los aparatos en espera."),
    ("¿Cómo quito el óxido de un cuchillo?",
     "Frótalo con medio limón y sal, acláralo y sécalo enseguida."),
    ("¿Cómo hago que duren más las flores cortadas?",
     "Corta los tallos en diagonal y cambia el agua cada dos días."),
)  # fmt: skip
GREETINGS = (
    "Hola", "Buenos días", "Buenas tardes", "Buenas noches", "¡Hola, Enlace!", "¿Qué tal?",
    "Hola, ¿cómo estás?", "Buenas", "Hola, ¿me ayudas?", "Hola de nuevo",
)  # fmt: skip
GREETING_REPLIES = (
    "¡Hola! ¿En qué puedo ayudarte?",
    "¡Hola! Aquí estoy. ¿Qué necesitas?",
    "¡Buenas! Dime en qué te ayudo.",
    "¡Hola! Muy bien, gracias. ¿Qué te hace falta?",
)
THANKS = ("Gracias", "Muchas gracias", "Gracias, eso es todo", "Vale, gracias")
THANKS_REPLIES = ("¡De nada! Aquí estoy para lo que necesites.", "¡A ti! Que tengas un buen día.")
SOURCES = (
    ("aemet.es", "AEMET"), ("elpais.com", "El País"), ("rtve.es", "RTVE"),
    ("elmundo.es", "El Mundo"), ("20minutos.es", "20minutos"), ("europapress.es", "Europa Press"),
)  # fmt: skip
WEATHER = ("soleado", "nublado", "con lluvia", "con viento", "con tormentas", "con niebla")
# (how a question names the day, how a query names it)
DAYS = (
    ("hoy", "hoy"), ("mañana", "mañana"), ("el sábado", "sábado"), ("el domingo", "domingo"),
    ("el lunes", "lunes"), ("este fin de semana", "fin de semana"),
)  # fmt: skip
MONTHS = (
    "enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre",
    "octubre", "noviembre", "diciembre",
)  # fmt: skip
# Names a reply may state as facts: one that the tool result did not give is an invention.
FACT_NAMES = (*CITIES, *(name for _, name in TEAMS), *(name for _, name in SOURCES))
# In training, this share of the cities, teams, products and news topics are invented names
# (Spanish-sounding, drawn from syllables): a small model remembers a hundred real names after a
# few epochs and writes them whatever the question, but a name it has never seen can only be right
# by copying it from the question (and a fact only by copying it from the result).
INVENTED_SHARE = 0.6
ONSETS = (
    "b", "c", "d", "f", "g", "l", "m", "n", "p", "r", "s", "t", "v", "ch", "br", "cr", "tr",
    "pl", "gu", "qu", "ll", "z", "j",
)  # fmt: skip
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ia", "ue")
CODAS = ("", "", "", "n", "s", "r", "l")


def _invented(rng: random.Random, capital: bool = True) -> str:
    """A made-up Spanish-sounding word of 2-4 syllables (Tarvena, Molisquén...)."""
    word = "".join(
        rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
        for _ in range(rng.randint(2, 4))
    )
    return word.capitalize() if capital else word


def _pick(rng: random.Random, values: tuple[Any, ...], val: bool, invent: Any) -> Any:
    """A value of the split (`_split`) or, in training, an invented one (`invent(rng)`)."""
    if not val and rng.random() < INVENTED_SHARE:
        return invent(rng)
    return rng.choice(_split(values, val))


@dataclass(frozen=True)
class Search:
    """A question that needs current information and the result (the query is the question's own
    words: `search_query`)."""

    question: str
    entities: tuple[str, ...]  # what the query must name (the question's city, team, day...)
    fact: str  # the sentence the search result states
    facts: tuple[str, ...]  # the values of `fact` an answer must carry (a number, a time...)


def _split(values: tuple[Any, ...], val: bool) -> list[Any]:
    """Every HELD_OUT_EVERY-th value (1-based) belongs to validation only."""
    return [v for i, v in enumerate(values) if ((i + 1) % HELD_OUT_EVERY == 0) == val]


def _es(text: str) -> str:
    """Spanish contractions: «de el» is «del», «a el» is «al»."""
    return text.replace(" de el ", " del ").replace(" a el ", " al ")


def _search(rng: random.Random, val: bool) -> Search:
    """A search question with its query and a result drawn at random: the values (a temperature,
    a score, a price, a time) are whatever the result says, so an answer is right only by copying
    them from the result, never from what similar questions were answered before."""
    kind = rng.randrange(5)
    if kind == 0:
        city, (day, day_q) = _pick(rng, CITIES, val, _invented), rng.choice(DAYS)
        sky, t = rng.choice(WEATHER), rng.randint(-5, 44)
        q = rng.choice(
            (f"¿Qué tiempo hará {day} en {city}?", f"¿Va a llover {day} en {city}?",
             f"¿Qué temperatura hace {day} en {city}?", f"En {city}, ¿qué tiempo hace {day}?",
             f"¿Cómo estará el cielo en {city} {day}?", f"Dime el tiempo de {city} para {day}.",
             f"¿Hará frío {day} en {city}?", f"¿Necesito paraguas {day} en {city}?")
        )  # fmt: skip
        fact = f"{day.capitalize()} en {city}: {sky}, máxima de {t} grados."
        return Search(q, (city, day_q), fact, (sky, f"{t} grados"))
    if kind == 1:
        (art, team), (_, rival) = rng.sample(_split(TEAMS, val), 2)
        if not val and rng.random() < INVENTED_SHARE:
            art, team = "el", _invented(rng)
        a, b = rng.randint(0, 5), rng.randint(0, 5)
        q = rng.choice(
            (f"¿Cómo quedó {art} {team} ayer?", f"¿Ganó {art} {team} su último partido?",
             f"¿Qué resultado sacó {art} {team} el domingo?", f"Dime cómo ha quedado {art} {team}.",
             f"¿{team} ganó o perdió?", f"¿Cuánto quedó el partido de {art} {team}?")
        )  # fmt: skip
        fact = f"{team} {a}, {rival} {b}: así acabó el último partido de {art} {team}."
        return Search(q, (team,), fact, (f"{team} {a}", f"{rival} {b}"))
    if kind == 2:
        art, product = _pick(
            rng, PRODUCTS, val, lambda r: (r.choice(("el", "la")), _invented(r, False))
        )
        price = f"{rng.randint(0, 99)},{rng.randint(0, 99):02d}"
        q = rng.choice(
            (f"¿A cuánto está hoy {art} {product}?", f"¿Cuál es el precio actual de {art} {product}?",
             f"¿Cuánto cuesta {art} {product} esta semana?", f"¿Ha subido {art} {product}?",
             f"Precio de {art} {product}, por favor.", f"¿Está caro {art} {product}?")
        )  # fmt: skip
        fact = f"Precio medio de {art} {product} hoy: {price} euros."
        return Search(q, (product,), fact, (f"{price} euros",))
    if kind == 3:
        (art, place), city = rng.choice(_split(PLACES, val)), _pick(rng, CITIES, val, _invented)
        o, c = (
            f"{rng.randint(6, 11)}:{rng.choice('0134')}0",
            f"{rng.randint(13, 22)}:{rng.choice('0134')}0",
        )
        q = rng.choice(
            (f"¿A qué hora abre {art} {place} de {city}?", f"¿Qué horario tiene {art} {place} de {city}?",
             f"En {city}, ¿cuándo abre {art} {place}?", f"¿Hasta qué hora está abierto {art} {place} de {city}?")
        )  # fmt: skip
        fact = f"{art.capitalize()} {place} de {city} abre hoy de {o} a {c}."
        return Search(q, (place, city), fact, (o, c))
    topic = _pick(rng, NEWS, val, lambda r: f"{r.choice(('el', 'la'))} {_invented(r, False)}")
    d, month = rng.randint(1, 28), rng.choice(MONTHS)
    q = rng.choice(
        (f"¿Qué se sabe hoy de {topic}?", f"¿Cuáles son las últimas noticias sobre {topic}?",
         f"¿Hay novedades sobre {topic}?", f"Cuéntame qué pasa con {topic}.")
    )  # fmt: skip
    bare = topic.split(" ", 1)[1]
    fact = f"Última hora sobre {topic}: habrá novedades el {d} de {month}."
    return Search(q, (bare,), fact, (f"{d} de {month}",))


def search_query(question: str) -> str:
    """The query of a search: the question's own words without its «¿?¡!» and final period
    («¿Qué tiempo hará mañana en Zaragoza?» → «Qué tiempo hará mañana en Zaragoza»). Search
    engines take a question as it is asked, and every byte of such a query is a copy of the
    question with the same bytes before it, which a small model can learn (a rewritten query,
    «tiempo Zaragoza mañana», puts the city after bytes the question does not have, and the
    city's first byte was missed: benchmarks/CHAT.md, tenth session)."""
    return re.sub(r"[¿?¡!]", "", question).strip().removesuffix(".").strip()


def _search_turns(rng: random.Random, s: Search) -> list[dict[str, Any]]:
    s = Search(_es(s.question), s.entities, _es(s.fact), s.facts)
    query = search_query(s.question)
    domain, name = rng.choice(SOURCES)
    result = (
        f"Resultados para «{query}»:\n[1] {name} — https://www.{domain}/\n    {s.fact}\n"
        "(fuente: duckduckgo)"
    )
    # The answer is the result's line as it stands, cited by the address the result gives: each
    # copied span comes after the same bytes as in the result («www.»), or at the answer's start
    # as at its line's; «Según El País (elpais.com): …» put the name and the fact after bytes the
    # result never has, and a small model missed their first bytes (CHAT.md, tenth session).
    answer = f"{s.fact} (fuente: www.{domain})"
    return _tool_turns(s.question, SEARCH_TOOL_NAME, {"consulta": query}, result, answer)


def _qa(*texts: str) -> list[dict[str, Any]]:
    """Turns alternating user and assistant."""
    return [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)]


def _refusal_turns(rng: random.Random, question: str) -> list[dict[str, Any]]:
    reply = rng.choice(
        (
            "No tengo acceso a información actualizada, así que no puedo saberlo. "
            "Te recomiendo consultarlo en una fuente fiable.",
            "Lo siento, no puedo consultar datos de hoy: no tengo conexión a internet.",
        )
    )
    return _qa(question, reply)


def _plain(rng: random.Random, val: bool) -> list[dict[str, Any]]:
    """A question to answer without searching: a greeting, general knowledge, a sum or a product,
    a household question."""
    kind = rng.randrange(4)
    if kind == 0:
        turns = _qa(rng.choice(GREETINGS), rng.choice(GREETING_REPLIES))
        if rng.random() < 0.3:
            turns += _qa(rng.choice(THANKS), rng.choice(THANKS_REPLIES))
        return turns
    if kind == 1:
        if rng.random() < 0.6:
            country, capital = rng.choice(_split(COUNTRIES, val))
            q = rng.choice(
                (f"¿Cuál es la capital de {country}?", f"Dime la capital de {country}.",
                 f"¿Cómo se llama la capital de {country}?")
            )  # fmt: skip
            return _qa(q, f"La capital de {country} es {capital}.")
        return _qa(*rng.choice(_split(FACTS, val)))
    if kind == 2:
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        op, value = rng.choice((("más", a + b), ("por", a * b)))
        q = rng.choice((f"¿Cuánto es {a} {op} {b}?", f"¿Cuántos son {a} {op} {b}?"))
        return _qa(q, f"{a} {op} {b} son {value}.")
    return _qa(*rng.choice(_split(HOUSEHOLD, val)))


# ----------------------------------------------------------------------------- memory
# Of the conversations, when the tools offered include the memory's: this share remember, use or
# forget a fact of the family.
MEMORY_SHARE = 0.25
# The system prompt's memory block is enlace-agent's (assistant/prompt.py's memory_block), from
# the words both packages import (enlace_config.contracts).
PEOPLE = (
    "Ana", "Luis", "Bruno", "Carmen", "Lucía", "Pablo", "Marta", "Javier", "Elena", "Diego",
    "Sofía", "Hugo", "Paula", "Mario", "Irene", "Daniel", "Laura", "Álvaro", "Sara", "Tomás",
)  # fmt: skip
ALLERGIES = ("los frutos secos", "la lactosa", "el marisco", "el gluten", "el polen", "el huevo")
PETS = ("perro", "gato", "loro", "conejo", "hámster", "tortuga")
# (what a person asks to remember, the question that needs it later, the answer that uses it)
MEMORY_FACTS = (
    ("mi hija se llama {name}", "¿Cómo se llama mi hija?", "Tu hija se llama {name}."),
    ("mi hijo se llama {name}", "¿Cómo se llama mi hijo?", "Tu hijo se llama {name}."),
    ("soy alérgica a {allergy}", "¿A qué soy alérgica?", "Eres alérgica a {allergy}."),
    ("la abuela vive en {city}", "¿Dónde vive la abuela?", "La abuela vive en {city}."),
    ("el colegio de {name} empieza a las {time}", "¿A qué hora empieza el colegio de {name}?",
     "El colegio de {name} empieza a las {time}."),
    ("mi cumpleaños es el {day} de {month}", "¿Cuándo es mi cumpleaños?",
     "Tu cumpleaños es el {day} de {month}."),
    ("nuestro {pet} se llama {name}", "¿Cómo se llama nuestro {pet}?",
     "Vuestro {pet} se llama {name}."),
    ("el dentista es el {day} de {month} a las {time}", "¿Cuándo tengo el dentista?",
     "El dentista es el {day} de {month} a las {time}."),
)  # fmt: skip


def _memory_fact(rng: random.Random, val: bool) -> tuple[str, str, str, list[str]]:
    """A fact of the family (its words, the later question, the answer, and the values its words
    carry: what a `recordar` call must keep), its values drawn at random (names invented as for
    the searches), so only the memory can answer it."""
    said, question, answer = rng.choice(MEMORY_FACTS)
    values = {
        "name": _pick(rng, PEOPLE, val, _invented),
        "allergy": rng.choice(ALLERGIES),
        "city": _pick(rng, CITIES, val, _invented),
        "time": f"{rng.randint(7, 20)}:{rng.choice('0134')}0",
        "day": str(rng.randint(1, 28)),
        "month": rng.choice(MONTHS),
        "pet": rng.choice(PETS),
    }
    entities = [values[key] for key in re.findall(r"{(\w+)}", said)]
    return said.format(**values), question.format(**values), answer.format(**values), entities


def _memory_conversation(
    rng: random.Random, val: bool, tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """A person asks to remember a fact (`recordar`, for them or for the whole family), to forget
    one (`olvidar`), or asks what a remembered fact answers; the system prompt carries the person
    and the numbered memories as the assistant writes them."""
    person = rng.choice(_split(PEOPLE, val))
    facts = [_memory_fact(rng, val) for _ in range(rng.randint(0, 3))]
    kind = rng.randrange(3) if facts else 0
    said, question, answer, entities = _memory_fact(rng, val) if kind == 0 else rng.choice(facts)
    family = rng.random() < 0.3
    if facts:
        lines = [
            f"{n}. [{rng.choice(('familia', person))}] «{f[0][0].upper() + f[0][1:]}»"
            for n, f in enumerate(facts, 1)
        ]
        block = "\n".join([MEMORY_HEAD.format(persona=person), *lines, MEMORY_TOOLS])
    else:
        block = f"{NO_MEMORIES.format(persona=person)}\n{MEMORY_TOOLS}"
    system = rng.choice(SYSTEMS[2:]) + _list_paragraph(tools) + "\n\n" + block
    text = said[0].upper() + said[1:]
    if kind == 0:  # remember
        ask = rng.choice(("Recuerda que {}.", "Acuérdate de que {}.", "Apunta que {}."))
        if family:
            ask = rng.choice(
                ("Recuerda para toda la familia que {}.", "Que lo sepa toda la familia: {}.")
            )
        arguments: dict[str, Any] = {"texto": text}
        if family:
            arguments["alcance"] = "familia"
        result = f"Guardado (recuerdo {'de la familia' if family else f'de {person}'}): «{text}»."
        reply = rng.choice(("De acuerdo, lo recordaré.", "Hecho: me acordaré.", "Apuntado."))
        turns = _tool_turns(ask.format(said), REMEMBER_TOOL_NAME, arguments, result, reply)
    elif kind == 1:  # forget
        ask = rng.choice(
            ("Olvida que {}.", "Ya no hace falta que recuerdes que {}.", "Borra que {}.")
        )
        result = f"Olvidado: «{text}»."
        reply = rng.choice(("Hecho, ya lo he olvidado.", "Olvidado.", "De acuerdo, lo he borrado."))
        turns = _tool_turns(ask.format(said), FORGET_TOOL_NAME, {"recuerdo": text}, result, reply)
    else:  # use
        turns = _qa(question, answer)
    conv = {"messages": [{"role": "system", "content": system}, *turns], "tools": tools}
    if kind == 0:  # what the call must carry (enlace-train's memory fidelity)
        conv["expect"] = {"memory": entities}
    return conv


# ----------------------------------------------------------------------------- shopping list
# Of the conversations, when the tools offered include the household's shopping list: this share
# add to it, remove from it or read it (`lista_de_la_compra`).
SHOPPING_SHARE = 0.1
GROCERIES = (
    "leche", "huevos", "pan", "tomates", "arroz", "aceite", "manzanas", "yogures", "café",
    "patatas", "cebollas", "queso", "lentejas", "plátanos", "galletas", "detergente", "papel de cocina",
    "pasta", "azúcar", "sal", "harina", "naranjas", "pollo", "jabón", "garbanzos",
)  # fmt: skip


def _list_paragraph(tools: list[dict[str, Any]]) -> str:
    """The shopping list's paragraph as the assistant puts it before the memory block, when the
    list is offered."""
    offered = SHOPPING_LIST_TOOL_NAME in {tool_name(t) for t in tools}
    return "\n\n" + SHOPPING_LIST_PROMPT if offered else ""


def _shopping_conversation(
    rng: random.Random, val: bool, tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """A person adds to the family's shopping list, removes from it or asks what is on it; the
    tool's results are what enlace-agent's tool writes (tests/test_chat_shopping_list.py)."""
    person = rng.choice(_split(PEOPLE, val))
    goods = _split(GROCERIES, val)
    kind = rng.randrange(3)
    things = rng.sample(goods, rng.choice((1, 1, 2)))
    said = " y ".join(things)
    if kind == 0:  # add
        ask = rng.choice(
            ("Añade {} a la lista de la compra.", "Apunta {} en la lista.", "Añade {} a la lista.")
        )
        arguments: dict[str, Any] = {"accion": "añadir", "cosas": things}
        result = f"Añadido a la lista: {', '.join(things)}."
        reply = rng.choice((f"Hecho: he añadido {said} a la lista.", f"Apuntado: {said}."))
    elif kind == 1:  # remove
        ask = rng.choice(("Quita {} de la lista.", "Borra {} de la lista de la compra."))
        arguments = {"accion": "quitar", "cosas": things}
        result = f"Quitado de la lista: {', '.join(things)}."
        reply = rng.choice((f"Hecho: he quitado {said} de la lista.", f"Quitado: {said}."))
    else:  # read
        ask = rng.choice(("¿Qué hay en la lista de la compra?", "¿Qué tenemos que comprar?"))
        arguments = {"accion": "ver"}
        result = f"En la lista: {', '.join(things)}."
        reply = f"En la lista de la compra hay: {said}."
    system = rng.choice(SYSTEMS[2:]) + _list_paragraph(tools)
    if {REMEMBER_TOOL_NAME, FORGET_TOOL_NAME} <= {tool_name(t) for t in tools}:
        system += f"\n\n{NO_MEMORIES.format(persona=person)}\n{MEMORY_TOOLS}"
    turns = _tool_turns(ask.format(said), SHOPPING_LIST_TOOL_NAME, arguments, result, reply)
    return {"messages": [{"role": "system", "content": system}, *turns], "tools": tools}


def _tool_turns(
    question: str, name: str, arguments: dict[str, Any], result: str, reply: str
) -> list[dict[str, Any]]:
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": result},
        {"role": "assistant", "content": reply},
    ]


# People type on a phone, and voice assistants transcribe, without the final period: «Añade leche a
# la lista de la compra». A model that saw every order end in «.» answers that one as a question
# (benchmarks/CHAT.md, seventh session), so this share of the user turns that end in one lose it.
UNPUNCTUATED_SHARE = 0.5


def _as_typed(conversations: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """`conversations` with UNPUNCTUATED_SHARE of their user turns' final periods dropped (a draw
    of its own per turn, so the conversations are otherwise those of the same seed)."""
    for conv in conversations:
        for m in conv["messages"]:
            ends = m["role"] == "user" and m["content"].endswith(".")
            if ends and rng.random() < UNPUNCTUATED_SHARE:  # a draw only for those that end in one
                m["content"] = m["content"][:-1]
    return conversations


def builtin_conversations(
    split: str, n: int, *, seed: int = 0, tools: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """n conversations of the train or val split ({"messages", optional "tools"}), the same for
    the same (split, n, seed). `tools` replaces the short spec of the search tool in the
    conversations that offer it, so that a model learns the very specs its assistant sends."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    offered = check_tools(tools, "tools") if tools is not None else [SEARCH_TOOL]
    # The assistant offers the search alone when it does not know who speaks (the terminal, the
    # end-to-end test), and every tool with the person's memories on the page.
    searching = [t for t in offered if tool_name(t) == SEARCH_TOOL_NAME]
    memory = {REMEMBER_TOOL_NAME, FORGET_TOOL_NAME} <= {tool_name(t) for t in offered}
    shopping = SHOPPING_LIST_TOOL_NAME in {tool_name(t) for t in offered}
    val = split == "val"
    rng = random.Random(f"enlace-chat-builtin:{split}:{seed}")
    out: list[dict[str, Any]] = []
    for _ in range(n):
        with_tools = rng.random() < 0.5
        expect: dict[str, list[str]] = {}
        if memory and rng.random() < MEMORY_SHARE:  # offered all the tools, as to a known person
            out.append(_memory_conversation(rng, val, offered))
            continue
        if shopping and rng.random() < SHOPPING_SHARE:  # the household's list, a known person
            out.append(_shopping_conversation(rng, val, offered))
            continue
        if rng.randrange(4) < 2:  # half of them plain, half needing current information
            turns = _plain(rng, val)
        elif with_tools:
            s = _search(rng, val)
            turns = _search_turns(rng, s)
            expect = {"query": list(s.entities), "answer": list(s.facts)}
        else:
            turns = _refusal_turns(rng, _es(_search(rng, val).question))
        system = rng.choice(SYSTEMS)
        messages = ([{"role": "system", "content": system}] if system else []) + turns
        conv: dict[str, Any] = {"messages": messages}
        if with_tools:
            conv["tools"] = searching
        if expect:
            conv["expect"] = expect
        out.append(conv)
    return _as_typed(out, random.Random(f"enlace-chat-typed:{split}:{seed}"))
