"""Build bench/cases/handmade_synth: own themes, lowercase chatty wording, names; not from gen.py."""
import json
import random
from datetime import datetime, timedelta

R = random.Random(7)
APP = ("notes-app", None, "sess-1")
users = {
 "u-h01": dict(scoped=True, themes={
   "stargazing": ["maya got an 8 inch dobsonian for her birthday",
     "drove out past the city lights last night just to see saturn's rings",
     "keeps a logbook of every messier object she has spotted so far",
     "joined the astro club that meets at the old observatory on fridays",
     "checks the clear sky forecast every evening before deciding to go out",
     "wants to try astrophotography once she can afford a tracking mount"],
   "home brewing": ["brewed a first batch of pale ale in the kitchen, 20 litres",
     "maya bought a hydrometer to check the gravity of her beer",
     "the stout she bottled in march is finally carbonated",
     "is thinking about kegging instead of bottling next time",
     "orders hops from a small farm in kent"]},
   filler=["maya's sister lives in glasgow", "allergic to cats, sadly", "her phone is a pixel 7",
     "hates coriander", "favourite film is spirited away", "works as a pharmacist",
     "maya's flat is on the third floor", "drinks oat milk in coffee", "grew up in cork",
     "birthday is 2 june", "prefers short answers", "doesn't like driving at night",
     "she got a parking ticket last tuesday", "has a dentist appointment on the 14th",
     "likes crime podcasts"]),
 "u-h02": dict(scoped=False, themes={
   "sailing": ["tom crewed on a 32 foot yacht in the club race on sunday",
     "passed the day skipper theory exam",
     "wants to charter a boat in croatia with friends next summer",
     "keeps checking wind forecasts on windy before weekends",
     "learned to tie a bowline without looking",
     "bought a proper set of foul weather gear"]},
   filler=["tom uses vim for everything", "repo uses poetry for deps", "prefers tabs", "ci runs on github actions",
     "tom's manager is ines", "standup is at 9:30", "deploys happen on thursdays", "the api is written in go",
     "likes concise commit messages", "staging db is postgres 15", "tom is on the payments team",
     "asked for a regex to parse dates", "prefers pytest over unittest", "wants answers in english",
     "tom's laptop is a macbook pro", "the service runs on kubernetes"],
   extra_scoped=["tom lives in bristol", "has two kids"]),
 "u-h03": dict(scoped=True, themes={
   "caring for an aging father": ["priya's dad was diagnosed with early dementia in january",
     "she drives to her father's house every wednesday to sort his pills",
     "looking into day care options for her dad",
     "set up a shared calendar with her brother for dad's appointments",
     "worried her father shouldn't live alone much longer",
     "got power of attorney sorted for dad last month"],
   "rust rewrite": ["priya's team is rewriting the ingest service from python to rust",
     "she spent the week fighting the borrow checker",
     "benchmarks show the rust version uses a third of the memory",
     "wants to learn async rust properly with tokio",
     "the old python service will be switched off in q3"],
   "beekeeping": ["priya keeps two beehives at the allotment",
     "harvested about 12 jars of honey this year",
     "did a varroa mite check on both hives",
     "one of her colonies swarmed in may",
     "wears a full bee suit after getting stung on the eyelid"]},
   filler=["priya supports arsenal", "her husband is called dev", "vegetarian since uni",
     "drives a blue skoda fabia", "prefers dark mode", "reads mostly sci-fi", "lives in leicester",
     "priya is left handed", "has a fear of heights", "her birthday is 30 october",
     "priya's favourite food is dosa", "uses an iphone 13", "studied maths at warwick",
     "wants answers in bullet points"]),
 "u-h04": dict(scoped=True, themes={
   "learning guitar (small user)": ["leo started guitar lessons on tuesdays",
     "practises barre chords every night for 20 minutes", "bought a second hand yamaha acoustic",
     "learning wonderwall, obviously", "his fingertips finally stopped hurting"]},
   filler=["leo lives in lyon", "leo is a nurse", "likes strong coffee", "has a brother called max",
     "leo hates the cold", "his bike got stolen", "prefers french"]),
 "u-h05": dict(scoped=True, themes={},
   filler=["ana lives in porto", "works at a law firm", "ana has a grey cat called nuvem",
     "cat needed a vet visit for a sore paw", "drinks green tea", "ana's mum is called rosa",
     "flew to madrid for a wedding in april", "prefers aisle seats", "ana speaks english and portuguese",
     "birthday on 11 november", "her car is a renault clio", "allergic to penicillin",
     "ana likes jazz", "she doesn't eat pork", "studied in coimbra", "went to see a play last week",
     "ana is saving for a new sofa", "uses a kindle", "has a standing desk at home",
     "wants formal replies", "ana's brother is getting married", "her flat has no balcony",
     "likes hiking in the gerês", "ana's phone number changed last month"]),
 "u-h06": dict(scoped=False, themes={
   "animal shelter volunteering": ["kenji volunteers at the dog shelter every saturday morning",
     "he walks the older dogs that nobody picks", "fostering two kittens until they can be adopted",
     "helped organise a fundraiser raffle for the shelter", "is thinking of training as a shelter volunteer lead"],
   "surfing": ["kenji caught his first green wave at the weekend",
     "bought a 7'6 foam board to learn on", "takes surf lessons in ericeira",
     "checks the swell report most mornings", "wants to go on a surf trip to morocco"]},
   filler=["kenji's editor is vscode", "the frontend uses react", "prefers small prs", "uses pnpm",
     "kenji writes typescript", "review bot should be polite", "code style: prettier defaults",
     "kenji's team ships on fridays, oddly", "tests live next to the source files", "node 20 in prod",
     "kenji is the only designer-developer", "asked for help with css grid"]),
 "u-h07": dict(scoped=True, themes={
   "ceramics side business": ["sofia sells her ceramic mugs on etsy",
     "she got a second hand kiln for the garage",
     "doing a pop-up stall at the christmas market",
     "needs to work out how to price glazed bowls",
     "registered as self employed for the pottery sales",
     "takes commissions for wedding gift sets"],
   "airflow migration": ["sofia's team is moving the nightly jobs from cron to airflow",
     "she wrote the first dag for the billing export",
     "backfills in airflow keep timing out",
     "wants to alert on failed dag runs in slack",
     "the old cron box gets turned off once all 40 jobs are ported"]},
   filler=["sofia lives in valencia", "her partner is marco", "likes very spicy food", "has asthma",
     "favourite band is radiohead", "sofia speaks catalan", "drives a fiat panda", "runs 5k now and then",
     "her mum lives in bilbao", "prefers tea to coffee", "has a nephew called pau",
     "is watching the bear", "uses a thinkpad", "sofia's birthday is 3 may",
     "wants code examples in python", "allergic to nuts", "reads before bed", "sofia hates mornings",
     "went to lisbon for a long weekend", "her dog is a beagle called tapa",
     "sofia's office is in the city centre", "doesn't like phone calls", "is colour blind",
     "got a new haircut"]),
}
events, labels, themes = [], [], []
rows = []
for uid, u in users.items():
    for hint, texts in u["themes"].items():
        themes.append((uid, hint, texts))
        rows += [(uid, t, True) for t in texts]
    rows += [(uid, t, u["scoped"]) for t in u["filler"]]
    rows += [(uid, t, True) for t in u.get("extra_scoped", [])]
R.shuffle(rows)
t0 = datetime(2025, 5, 1, 8, 0)
mid_of = {}
for i, (uid, text, scoped) in enumerate(rows, 1):
    mid = f"h-{i:05d}"; mid_of[(uid, text)] = mid
    app, agent, run = (None, None, None) if scoped else APP
    events.append({"type": "memory.added", "event_id": f"he-{i:05d}", "memory_id": mid, "user_id": uid,
        "app_id": app, "agent_id": agent, "run_id": run, "text": text,
        "created_at": (t0 + timedelta(hours=7 * i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "metadata": {"type": "user_fact", "confidence": 0.9, "pinned": False}})
    labels.append({"memory_id": mid, "expect": "active"})
import os

out = os.path.dirname(os.path.abspath(__file__)) + "/"
with open(out + "events.jsonl", "w") as f: f.writelines(json.dumps(e) + "\n" for e in events)
with open(out + "labels.jsonl", "w") as f: f.writelines(json.dumps(l) + "\n" for l in labels)
with open(out + "themes.jsonl", "w") as f:
    for n, (uid, hint, texts) in enumerate(themes, 1):
        if "small user" in hint: continue  # leo has < 20 memories: no theme expected
        f.write(json.dumps({"user_id": uid, "theme": f"ht-{n:03d}", "hint": hint,
                            "memory_ids": sorted(mid_of[(uid, t)] for t in texts)}) + "\n")
print(len(events), "events", len(themes), "themes")
