def process_results(doc, results):
    generation = results[0].strip()
    return {
        "exact_match": float(generation in doc["answers"]),
        "prefix_match": float(any(answer.startswith(generation[:2]) for answer in doc["answers"])),
    }
