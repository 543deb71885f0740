// The text the built-in vocabulary learns its merges from: plain English prose and a little
// C++ and Python, so common words and code tokens become single tokens.
#include "tools/builtin_vocab.h"

namespace zenmoe::tools {

const char* builtin_vocab_corpus() {
  return R"corpus(The quick brown fox jumps over the lazy dog. The dog did not move, and the fox ran back into the forest.
Once upon a time there was a small town by the sea. The people of the town were fishermen, and every morning they went out in their boats before the sun came up. In the evening they came back with fish, and their children waited for them on the beach.
One day a storm came from the west. The wind was strong and the waves were high. The fishermen stayed at home, and the children played inside. When the storm was over, the sky was clear and the water was calm again.
It is a truth that every language model reads text as a sequence of tokens. A token may be a whole word, a part of a word, a number, or a single character. The model predicts the next token from the tokens before it, one at a time.
Machine learning is the study of programs that improve with experience. A model is trained on data, and then it is used to make predictions on new data that it has not seen before. The quality of the predictions depends on the data, the model and the training.
Computers store numbers in memory. The processor loads them into registers, computes with them, and writes the results back. Memory is slow compared with the processor, so modern processors have caches: small, fast memories that keep the data that was used recently.
When a program reads a large array from the beginning to the end, the hardware can predict the next address and fetch the data before it is needed. This is called prefetching, and it is one reason why streaming through memory is much faster than jumping around at random.
A mixture of experts is a neural network in which each layer has many experts, but each token uses only a few of them. A router decides which experts to use for each token. Because only a few experts run for each token, the model can have many parameters while the cost of each token stays small.
The weather today is sunny with a few clouds in the afternoon. Tomorrow there will be rain in the morning, and the wind will come from the north. The temperature will be between ten and eighteen degrees.
She opened the door and looked outside. The street was empty, and the lights in the windows of the houses were still on. She walked to the end of the street, turned left, and went into the small shop at the corner.
"Good morning," said the man behind the counter. "What would you like today?"
"I would like some bread, a bottle of milk and two apples, please," she answered.
He put everything into a paper bag and told her the price. She paid, thanked him, and went back home.
There are many ways to solve a problem. Some people like to think for a long time before they start; others prefer to try something quickly and learn from their mistakes. Both ways can work, and the best choice often depends on the problem.
The history of science is full of simple questions with difficult answers. Why is the sky blue? Why do things fall down? How old is the earth? People asked these questions for thousands of years before they found good answers.
Water boils at one hundred degrees at sea level. On a high mountain the air pressure is lower, so water boils at a lower temperature, and it takes longer to cook food.
The library was quiet. Students sat at long tables, reading books and writing notes. Now and then someone stood up to find another book on the shelves, and the sound of their steps was the only noise in the room.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 12 16 32 64 100 128 256 512 1000 1024 2048 4096 2026 3.14 2.718 1e-6 0.5
#include <cstdint>
#include <string>
#include <vector>

namespace example {

// Returns the sum of the values in the vector.
int64_t sum(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (size_t i = 0; i < values.size(); ++i) total += values[i];
  return total;
}

struct Config {
  std::string name;
  int threads = 1;
  bool verbose = false;
};

class Buffer {
 public:
  explicit Buffer(size_t size) : data_(size, 0) {}
  size_t size() const { return data_.size(); }
  uint8_t* data() { return data_.data(); }
  const uint8_t* data() const { return data_.data(); }

 private:
  std::vector<uint8_t> data_;
};

template <class T>
T max_value(const T& a, const T& b) {
  return a < b ? b : a;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf("usage: %s FILE\n", argv[0]);
    return 1;
  }
  std::string path = argv[1];
  Config config;
  config.name = path;
  return 0;
}

}  // namespace example

def tokenize(text):
    """Split the text into words and return a list of strings."""
    words = []
    for word in text.split():
        if word:
            words.append(word.lower())
    return words

class Model:
    def __init__(self, path, threads=1):
        self.path = path
        self.threads = threads
        self.layers = []

    def forward(self, tokens):
        hidden = self.embed(tokens)
        for layer in self.layers:
            hidden = layer(hidden)
        return self.output(hidden)

def main():
    import sys
    if len(sys.argv) < 2:
        print("usage: model.py FILE")
        return 1
    model = Model(sys.argv[1])
    print(model.forward([1, 2, 3]))
    return 0

if __name__ == "__main__":
    main()
The children went to school in the morning and came home in the afternoon. After dinner they did their homework, read a story together, and went to bed early, because the next day was a school day too.
The old castle stood on a hill above the river. Its walls were thick and its towers were tall, but nobody had lived there for a hundred years. Travelers who passed by in the evening said that they could see a light in the highest window.
A good test checks one thing and says clearly what went wrong when it fails. It should be fast, it should give the same result every time it runs, and it should not depend on the order in which the tests are run.
The train left the station at seven o'clock. Through the window she could see fields, small villages and, far away, the blue line of the mountains. She opened her book and started to read, and when she looked up again they were already in the city.
Every function should do one thing and do it well. If a function grows too long, split it into smaller functions with clear names. Write comments that explain why the code is written this way, not what it does; the code itself says what it does.
In the spring the trees in the park turn green, and the first flowers open in the grass. People sit on the benches in the sun, children play near the water, and the birds sing from early morning until late in the evening.
The answer is yes. The answer is no. Maybe the answer is somewhere in between, and we should look at the question again more carefully before we decide what to do next.
)corpus";
}

}  // namespace zenmoe::tools
